"""Child streamcrew processes (workers, notifier, gateway) for the demo and the tests."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path


PARENT_PID_ENV = "_STREAMCREW_PARENT_PID"  # internal: set by Child, read once by the child's CLI
PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In a process a :class:`Child` started: get SIGTERM (and drain) when that parent dies, even by SIGKILL.

    Children run in their own session (so a Ctrl-C reaches the demo, which stops them in order); without this,
    a demo or test killed outright would leave its workers, notifier and gateway running forever.
    """
    parent = os.environ.pop(PARENT_PID_ENV, None)
    if not parent or not sys.platform.startswith("linux"):
        return
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != int(parent):  # it died before the line above
        os.kill(os.getpid(), signal.SIGTERM)


def streamcrew_cmd(*args: str) -> list[str]:
    """The CLI as a command line, run by this interpreter (works without the console script on PATH)."""
    return [sys.executable, "-m", "consumers.cli", *args]


class Child:
    """One child process with its log file; ``kill()`` is SIGKILL, ``terminate()`` SIGTERM."""

    def __init__(self, args: Sequence[str], *, env: dict[str, str] | None = None, log_path: Path | None = None,
                 cwd: Path | None = None, repo_on_path: bool = True) -> None:
        self.args = list(args)
        self.log_path = log_path
        self._log = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115 - closed in wait()
        full_env = {**os.environ, **(env or {}), PARENT_PID_ENV: str(os.getpid())}
        if repo_on_path:  # False runs an installed streamcrew (another venv's) as it is
            root = str(Path(__file__).resolve().parent.parent)
            full_env["PYTHONPATH"] = os.pathsep.join(p for p in (root, full_env.get("PYTHONPATH", "")) if p)
        self.process = subprocess.Popen(self.args, env=full_env, stdout=self._log, stderr=self._log, start_new_session=True, cwd=cwd)

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        if self.alive():
            os.kill(self.process.pid, signal.SIGKILL)
        self.wait(10)

    def terminate(self) -> None:
        if self.alive():
            self.process.send_signal(signal.SIGTERM)

    def wait(self, timeout: float) -> int | None:
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        if hasattr(self._log, "close"):
            self._log.close()  # type: ignore[union-attr]
        return code

    def stop(self, timeout: float = 15.0) -> int | None:
        self.terminate()
        code = self.wait(timeout)
        if code is None:
            self.kill()
        return code

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""
