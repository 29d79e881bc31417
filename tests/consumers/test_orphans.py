"""A stack the demo or a test started does not outlive it, even when it is SIGKILLed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

PARENT = """
import sys, time
from consumers.processes import Child, streamcrew_cmd
child = Child(streamcrew_cmd("mock-llm", "--port", "0"), log_path=None)
print(child.pid, flush=True)
time.sleep(600)
"""


def test_children_stop_when_their_parent_is_sigkilled(tmp_path: Path) -> None:
    # Given a parent process that started a child (its own session, as the demo's are)
    root = str(Path(__file__).resolve().parents[2])
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, cwd=root,
                              env={**os.environ, "PYTHONPATH": root})
    assert parent.stdout is not None
    child_pid = int(parent.stdout.readline())
    child = psutil.Process(child_pid)
    deadline = time.monotonic() + 30
    while child.status() == psutil.STATUS_ZOMBIE or not child.is_running():
        assert time.monotonic() < deadline, "the child never started"
        time.sleep(0.05)
    # When the parent dies without a chance to stop it
    parent.send_signal(signal.SIGKILL)
    parent.wait(10)
    # Then the child gets SIGTERM and exits
    try:
        child.wait(timeout=30)
    except psutil.TimeoutExpired:
        child.kill()
        raise AssertionError("the child outlived its SIGKILLed parent by 30 s") from None
