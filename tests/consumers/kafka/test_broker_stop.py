"""The test broker's teardown never hangs: SIGTERM, a short grace, then SIGKILL (Tansu may ignore SIGTERM)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from tests.consumers.kafka.broker import stop

DEAF = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"


def test_a_broker_that_ignores_sigterm_is_killed_after_the_grace() -> None:
    process = subprocess.Popen([sys.executable, "-c", DEAF], stdout=subprocess.PIPE)
    assert process.stdout is not None and process.stdout.readline() == b"ready\n"
    started = time.monotonic()
    stop(process, grace_s=0.5)
    process.stdout.close()
    assert process.returncode == -signal.SIGKILL
    assert time.monotonic() - started < 5


def test_a_broker_that_honours_sigterm_stops_at_once() -> None:
    process = subprocess.Popen([sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)"], stdout=subprocess.PIPE)
    assert process.stdout is not None and process.stdout.readline() == b"ready\n"
    stop(process, grace_s=10)
    process.stdout.close()
    assert process.returncode == -signal.SIGTERM
