"""A DNS server that never answers one domain stalls only that domain's deliveries (issue 10, defect 2).

The outer test runs the inner one in a network and mount namespace of its
own (``unshare``): loopback up, ``/etc/resolv.conf`` bind-mounted to name
127.0.0.1, where a UDP socket takes queries and never replies. Redis, the
receiver and the notifier process all run inside. ``localhost`` still
resolves (``/etc/hosts``); every ``*.slow.test`` lookup hangs.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from streams.keys import Keys
from tests.consumers.notifier.conftest import NotifierFactory, add_result
from tests.consumers.notifier.receiver import Receiver
from tests.support import wait_until

INSIDE = "STREAMCREW_TEST_IN_NETNS"
ROOT = Path(__file__).resolve().parents[3]


def _can_unshare() -> bool:
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        return False
    done = subprocess.run(["unshare", "--net", "--mount", "true"], capture_output=True, timeout=10)
    return done.returncode == 0


@pytest.mark.skipif(os.environ.get(INSIDE) == "1", reason="this is the outer half")
def test_a_dns_server_that_never_answers_delays_only_its_own_domain(tmp_path: Path) -> None:
    if not _can_unshare():
        pytest.skip("needs root and unshare(1) for a network namespace of the test's own")
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 127.0.0.1\noptions timeout:5 attempts:2\n")
    inner = f"{Path(__file__).relative_to(ROOT)}::test_inside_the_namespace"
    script = (f"ip link set lo up && mount --bind {resolv} /etc/resolv.conf && "
              f"exec {sys.executable} -m pytest -q -p no:cacheprovider {inner}")
    done = subprocess.run(["unshare", "--net", "--mount", "sh", "-c", script], cwd=ROOT, env={**os.environ, INSIDE: "1"},
                          capture_output=True, text=True, timeout=110)
    assert done.returncode == 0 and " passed" in done.stdout, done.stdout[-4000:] + done.stderr[-2000:]


@pytest.fixture
def silent_dns() -> Iterator[socket.socket]:
    """Port 53 on loopback takes every query and answers none."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 53))
    yield sock
    sock.close()


@pytest.mark.skipif(os.environ.get(INSIDE) != "1", reason="runs inside the namespace made by the outer test")
async def test_inside_the_namespace(redis: Redis, keys: Keys, notifiers: NotifierFactory, receiver: Receiver,
                                    silent_dns: socket.socket) -> None:
    # Given a notifier whose attempts may take 3 s, DNS included
    child = notifiers.start("--backoff", "0.2", env={"STREAMCREW_TIMEOUT_S": "3", "STREAMCREW_LOG_LEVEL": "info"})
    # When twelve deliveries to names under a silent domain are under way
    for i in range(12):
        await add_result(redis, keys, f"job-slow-{i}", f"http://h{i}.slow.test/hook")
    # Then a delivery to a healthy host is not held up behind them
    started = time.monotonic()
    await add_result(redis, keys, "job-healthy", f"http://localhost:{receiver.port}/healthy")
    await wait_until(lambda: receiver.count("/healthy") == 1, timeout=10, what="the healthy delivery")
    waited = time.monotonic() - started
    assert waited < 2.0, f"the healthy host waited {waited:.1f}s behind a silent DNS server"
    # And each slow delivery failed within its attempt's deadline, naming the reason, and was parked for a retry:
    # the domain's 4 lookups on the DNS timeout, the others at once, without waiting for one of those 4 slots
    def first_round() -> list[str]:
        return [line for line in child.log_text().splitlines() if "job=job-slow-" in line and "attempt=1 " in line]

    await wait_until(lambda: len(first_round()) == 12, timeout=10, what="twelve slow first attempts failed")
    lines = first_round()
    assert all("outcome=retry" in line for line in lines), lines[:3]
    timed_out = [line for line in lines if "DNS gave no answer" in line]
    at_once = [line for line in lines if "lookups under slow.test already in flight" in line]
    assert len(timed_out) >= 4 and at_once and len(timed_out) + len(at_once) == 12, lines
    assert all(float(line.split("seconds=")[1].split()[0]) < 3.0 for line in lines), lines
    assert all(float(line.split("seconds=")[1].split()[0]) < 0.5 for line in at_once), at_once
