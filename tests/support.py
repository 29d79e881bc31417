"""Test helpers: bounded waits with clear messages, and worker processes."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import tomllib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from pathlib import Path

import httpx
import redis as sync_redis
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import TimeoutError as RedisTimeoutError

from consumers.processes import Child, streamcrew_cmd
from streams.connection import _client_options
from streams.embedded import RedisServer, free_port
from streams.runtime import GroupRuntime

PORT_ATTEMPTS = 3
PORT_TAKEN = "address already in use"  # what the OS error says, in any process's log


def most_at_once(spans: list[tuple[int, int]]) -> int:
    """The most spans ``(start, end)`` open at one moment (an end at the same ms as a start closes first)."""
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans], key=lambda ev: (ev[0], ev[1]))
    now = most = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


async def wait_until(check: Callable[[], bool | Awaitable[bool]], *, timeout: float, what: str, every: float = 0.05) -> None:
    """Poll ``check`` (a plain or an async predicate) until it is true; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        done = check()
        if await done if inspect.isawaitable(done) else done:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(every)


async def wait_serving(child: Child, url: str, *, timeout: float, what: str) -> None:
    """Wait until ``url`` answers 200; fail at once, with its log, if ``child`` (the server) exited."""
    async def answers() -> bool:
        assert child.alive(), f"{what}: the process exited:\n{child.log_text()[-3000:]}"
        try:
            async with httpx.AsyncClient() as client:
                return (await client.get(url, timeout=1)).status_code == 200
        except httpx.TransportError:
            return False

    await wait_until(answers, timeout=timeout, what=what)


def wait_for_log(child: Child, text: str, *, timeout: float = 90.0) -> None:
    """Block until ``text`` shows in the child's log (the worker's ready line, say).

    The bound is generous: on a loaded 2-core machine CrewAI's import alone took 24 s of wall clock.
    """
    deadline = time.monotonic() + timeout
    while text not in child.log_text():
        if not child.alive():
            raise AssertionError(f"process exited with {child.process.returncode} before logging {text!r}:\n{child.log_text()[-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {text!r} in the log:\n{child.log_text()[-3000:]}")
        time.sleep(0.02)


def start_on_drawn_port(
    start: Callable[[int], Child], holds: Callable[[int], str], *, what: str, timeout: float = 90.0,
    draw: Callable[[], int] = lambda: free_port(), attempts: int = PORT_ATTEMPTS,
) -> tuple[Child, int]:
    """``start(port)`` starts a process on a port drawn here; it is returned once its own log shows ``holds(port)``,
    a line it writes once it holds the socket.

    Tests run in parallel: another process can bind a drawn port before this one does, and whatever answers
    there then is that process (a test once asked another test's gateway for its job). A process whose log says
    the port was taken (it exits, or runs on without /metrics) is stopped and another port drawn.
    """
    for _ in range(attempts):
        port = draw()
        child, line = start(port), holds(port)
        deadline = time.monotonic() + timeout
        while True:
            alive = child.alive()  # before the log: a process found exited has written all of it
            log = child.log_text()
            if line in log:
                return child, port
            if PORT_TAKEN in log.lower():
                break
            if not alive:
                raise AssertionError(f"{what} exited with {child.process.returncode}:\n{log[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what} to hold port {port}:\n{log[-3000:]}")
            time.sleep(0.02)
        child.kill()
    raise AssertionError(f"{what}: every port drawn was taken ({attempts} draws)")


def start_serving_metrics(start: Callable[[int], Child]) -> tuple[Child, int]:
    """``start(port)`` starts a process with ``--metrics-port port``; returned once it serves /metrics there
    (serve_metrics logs it before the ready line; a process that cannot listen runs on without /metrics)."""
    return start_on_drawn_port(start, lambda port: f":{port}/metrics", what="/metrics")


# What a test's worker serves unless it says otherwise: the agents of the bare install. The crews' CrewAI import costs
# a worker's start ~3 s of CPU (0.45 s without), and a suite run starts ~200 workers; the crews' own tests ask for them.
TEST_AGENTS = "echo,ask"


class WorkerFactory:
    """Starts ``streamcrew worker`` processes against the test's Redis and prefix."""

    def __init__(self, redis_url: str, prefix: str, log_dir: Path, *, env: dict[str, str] | None = None,
                 wrapper: Sequence[str] = ()) -> None:
        """``wrapper``: a command that runs each worker's command line (:func:`with_hosts`)."""
        self.env = env or {}
        self.wrapper = list(wrapper)
        self.redis_url = redis_url
        self.prefix = prefix
        self.log_dir = log_dir
        self.children: list[Child] = []

    def start(self, *args: str, env: dict[str, str] | None = None, wait_ready: bool = True, all_agents: bool = False) -> Child:
        """A worker of the bare install's agents (:data:`TEST_AGENTS`) unless the test names its own (``--agents``,
        ``--app``, their variables) or asks for ``all_agents``, the crews included (a CrewAI import at the start)."""
        n = len(self.children)
        base_env = {"STREAMCREW_REDIS_URL": self.redis_url, "STREAMCREW_PREFIX": self.prefix,
                    "STREAMCREW_METRICS_PORT": "0", "STREAMCREW_RETRY_BACKOFF_S": "0.05", **self.env}
        merged = {**base_env, **(env or {})}
        named = any(a in args for a in ("--agents", "--app")) or "STREAMCREW_AGENTS" in merged or "STREAMCREW_APP" in merged
        if not (all_agents or named):
            args = ("--agents", TEST_AGENTS, *args)
        child = Child([*self.wrapper, *streamcrew_cmd("worker", *args)], env=merged, log_path=self.log_dir / f"worker-{n}.log")
        self.children.append(child)
        if wait_ready:
            wait_for_log(child, " ready: ")
        return child

    def start_serving_metrics(self, *args: str, env: dict[str, str] | None = None, all_agents: bool = False) -> tuple[Child, int]:
        """A worker with /metrics on a port of its own (see :func:`start_serving_metrics`); returns it and the port."""
        return start_serving_metrics(lambda port: self.start(*args, "--metrics-port", str(port), env=env, all_agents=all_agents))

    def close(self) -> None:
        for child in self.children:
            if child.alive():
                child.kill()


async def results(redis, keys) -> list:  # type: ignore[no-untyped-def]
    """Every result event on the test's results stream, oldest first."""
    from streams.envelope import JobResult

    return [JobResult.from_fields(f) for _, f in await redis.xrange(keys.results)]


async def wait_results(redis, keys, n: int, *, timeout: float) -> list:  # type: ignore[no-untyped-def]
    """Wait until at least ``n`` result events exist; returns them all."""

    async def enough() -> bool:
        return int(await redis.xlen(keys.results)) >= n

    await wait_until(enough, timeout=timeout, what=f"{n} results (have {int(await redis.xlen(keys.results))})")
    return await results(redis, keys)


async def undelivered(redis, stream: str, group: str = "workers") -> list:  # type: ignore[no-untyped-def]
    """Entries of ``stream`` not yet delivered to ``group`` (acked entries may linger until the trim)."""
    info = next(g for g in await redis.xinfo_groups(stream) if g["name"] == group)
    ms, _, seq = str(info["last-delivered-id"]).partition("-")
    return await redis.xrange(stream, min=f"{ms}-{int(seq) + 1}")


# The password of the users the acl_user fixture makes: tests assert it never reaches a log.
ACL_PASSWORD = "acl-test-password-9f2c"

async def stall_redis(server: RedisServer, ms: int) -> asyncio.Task[object]:
    """The test's own Redis stalled for ``ms`` from now, as a paused host or VM stalls it: its process is stopped
    (SIGSTOP), so nothing is answered, connections still open (the kernel accepts them) and every command sent
    meanwhile runs once it is resumed (SIGCONT), by wall time whatever the server's version. (A busy Lua loop
    stalled it before: Redis 8 and Valkey 8 answer TIME inside a script with the time the script started, and
    os.clock counts only the CPU time a loaded machine gives it.) Returns once a PING goes unanswered (the stall
    has begun); await the task for its end."""
    url = server.url
    assert server.process is not None, "the server is not running"
    pid = server.process.pid
    async with Redis.from_url(url) as info_client:  # the process is the server itself, not a wrapper around it
        assert int((await info_client.info("server"))["process_id"]) == pid, "the server runs under another process"
    resume = threading.Timer(ms / 1000, os.kill, (pid, signal.SIGCONT))  # a thread: resumed even if the test's loop ends
    os.kill(pid, signal.SIGSTOP)
    resume.start()

    async def unanswered() -> bool:
        probe = Redis.from_url(url, socket_timeout=0.05, retry=Retry(NoBackoff(), 0))
        try:
            await probe.ping()
            return False
        except RedisTimeoutError:
            return True
        finally:
            await probe.aclose()

    await wait_until(unanswered, timeout=5, what="Redis to be stopped")
    return asyncio.create_task(asyncio.to_thread(resume.join))


def impatient_client(url: str, timeout_s: float = 0.5) -> Redis:
    """A client with the project's settings and retry policy (two more tries after a timeout), but giving a reply
    up after ``timeout_s`` instead of 15 s: with :func:`stall_redis`, a call it sends again while Redis is stalled."""
    return Redis.from_url(url, **{**_client_options(), "socket_timeout": timeout_s})


class StallsBeforeScript(Redis):
    """An impatient client (see :func:`impatient_client`) that, once armed, stalls Redis for ``stall_ms`` just
    before its next script call: that call, not the reads before it, is the one sent again."""

    armed_ms = 0
    stall: asyncio.Task[object] | None = None
    server: RedisServer

    async def execute_command(self, *args: object, **options: object) -> object:
        if self.armed_ms and args and args[0] == "EVALSHA":
            ms, self.armed_ms = self.armed_ms, 0
            self.stall = await stall_redis(self.server, ms)
        return await super().execute_command(*args, **options)

    @classmethod
    def to(cls, server: RedisServer, timeout_s: float = 0.5) -> StallsBeforeScript:
        client = cls.from_url(server.url, **{**_client_options(), "socket_timeout": timeout_s})
        client.server = server
        return client


async def evalsha_calls(redis: Redis) -> int:
    """How many EVALSHA calls Redis has run (copies of a call sent again count each)."""
    return int((await redis.info("commandstats")).get("cmdstat_evalsha", {}).get("calls", 0))


REPO = Path(__file__).resolve().parent.parent


def package_source(into: Path) -> Path:
    """A copy of what the wheel is built from (pyproject's readme and packages), for ``pip install`` to build in.

    pip builds a local project in its own tree's ``build/``: two installs of one tree at once (the
    bare-install and floors tests on two xdist workers) raced there and one failed with ENOENT.
    """
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    packages = [name.rstrip("*") for name in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]]
    into.mkdir(parents=True)
    for name in ["pyproject.toml", pyproject["project"]["readme"], *packages]:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, into / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, into / name)
    return into


class Replicated:
    """A master and one replica (``--replicaof``), each its own ``redis-server``."""

    def __init__(self, binary: str, directory: Path) -> None:
        self.master = RedisServer(binary).start()
        with sync_redis.Redis(host="127.0.0.1", port=self.master.port) as c:
            c.config_set("repl-diskless-sync-delay", 0)  # the replica syncs at once, not after Redis' default 5 s
        directory.mkdir(parents=True, exist_ok=True)
        self.replica = RedisServer(binary, directory=str(directory), extra_args=["--replicaof", "127.0.0.1", str(self.master.port)]).start()

    @property
    def replica_url(self) -> str:
        return self.replica.url

    @property
    def replica_pid(self) -> int:
        assert self.replica.process is not None
        return self.replica.process.pid

    def close(self) -> None:
        if self.replica.process is not None:
            os.kill(self.replica.process.pid, signal.SIGCONT)  # a test may have stopped it
        self.replica.close()
        self.master.close()


async def replica_caught_up(client: Redis) -> None:
    """Wait until the replica acknowledged a write that reached it through the replication stream.

    Neither "online" in INFO nor a WAIT right after the sync is enough: a write made before the
    master's backlog existed counts as acknowledged at offset 0, and until the replica's first
    acknowledgment of the stream a WAIT can block for its 1 s cron (seen: 0.93 s, failing the test).
    """
    target = 0

    async def acknowledged() -> bool:
        nonlocal target
        if not target:  # one write into the stream (once it exists, the offset moves); then wait for its acknowledgment
            await client.set("replica-probe", "1")
            target = int((await client.info("replication"))["master_repl_offset"])
            return False
        return int((await client.info("replication")).get("slave0", {}).get("offset", 0)) >= target

    await wait_until(acknowledged, timeout=20, what="the replica to acknowledge a write from its master's stream")


@contextlib.asynccontextmanager
async def serving(runtime: GroupRuntime) -> AsyncIterator[GroupRuntime]:
    """``runtime`` reading for the block; then it stops accepting and its loops end."""
    task = asyncio.create_task(runtime.run())
    try:
        yield runtime
    finally:
        runtime.stop_accepting()
        await asyncio.gather(task, return_exceptions=True)
        await runtime.stop_helpers()


@contextlib.contextmanager
def silent_ports(n: int) -> Iterator[list[int]]:
    """Loopback ports that take connections (the kernel's backlog) and never answer: nodes that hang."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(n)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
            s.listen(16)
        yield [int(s.getsockname()[1]) for s in sockets]


@contextlib.contextmanager
def silent_listener(host: str, port: int) -> Iterator[None]:
    """A node that hangs at ``host``:``port``: the kernel takes connections (the backlog), nothing ever answers."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, port))
        s.listen(16)
        yield


def with_hosts(hosts: Path) -> list[str] | None:
    """A command prefix that runs a command in a mount namespace of its own whose ``/etc/hosts`` is ``hosts`` (the
    network is the test's own, loopback and all); None where that cannot be made (not root, no unshare(1))."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return None
    wrapper = ["unshare", "--mount", "sh", "-c", f'mount --bind "{hosts}" /etc/hosts && exec "$0" "$@"']
    done = subprocess.run([*wrapper, "true"], capture_output=True, timeout=10)
    return wrapper if done.returncode == 0 else None


async def lease_holder(redis: Redis, lease: str, children: Sequence[Child]) -> Child:
    """Of ``children``, the process whose consumer name (``...-<pid>-<hex>``) holds ``lease`` (streams.upkeep),
    once one does."""
    async def held() -> bool:
        return await redis.get(lease) is not None
    await wait_until(held, timeout=10, what=f"a process to take the lease {lease}")
    name = await redis.get(lease)
    (holder,) = [c for c in children if f"-{c.pid}-" in name]
    return holder


async def stopped_holder_lets_go(redis: Redis, lease: str, holder: Child, other: Child) -> None:
    """SIGTERM ``holder`` and wait for its exit; it must have let ``lease`` go on its way out (left to lapse, the lease
    would name it for up to streams.upkeep.LEASE_S more), and ``other`` must take it up."""
    holder.terminate()
    assert holder.wait(30) == 0, holder.log_text()[-2000:]
    left = await redis.get(lease)
    assert left is None or f"-{holder.pid}-" not in left, f"{left} still holds it; its log:\n{holder.log_text()[-3000:]}"
    assert await lease_holder(redis, lease, [other]) is other
