"""What a worker on a Redis Cluster logs while one master hangs (SIGSTOP: a frozen VM), as tests/consumers/test_outage_log.py
checks on a single Redis.

The cluster client retries a call in a loop of its own (no redis-py ``Retry.call_with_retry``), so a call that timed
out reached the worker's loop only after every try: no line for the first socket timeouts, and none at all when the
replica had taken over by the next try. Now a loop is told at the first timed-out call (streams.cluster_client.StreamsCluster).
The read loop no longer waits on the hung master at all (streams.slow_slots): the master is said to be slow once, when a
call on one of its slots first goes unanswered past its time, and to answer again once. A cluster of its own: the hung node
stays a replica afterwards."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
import uuid
from datetime import datetime
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.crc import key_slot

from streams.connection import connect_detected
from streams.envelope import JobRequest
from streams.keys import Keys, partition_keys
from streams.producer import Producer
from tests.cluster.conftest import PARTITIONS
from tests.cluster.test_workers import wait_all_results
from tests.cluster_support import LocalCluster, placed_cluster
from tests.consumers.test_outage_log import outage_lines
from tests.support import WorkerFactory, wait_until

SOCKET_TIMEOUT_S = 2.0  # the worker's, through its URL (5 s by default on a cluster): a shorter test
STALL_S = 6.0  # past one socket timeout; the replica takes over meanwhile (1 s node timeout)
# The first line within one socket timeout and a loaded machine's slack: before, it came after the cluster client's
# tries (3 × the timeout plus refreshes), or never when the promoted replica answered a later try.
WARNED_WITHIN_S = SOCKET_TIMEOUT_S + 2.5
# the end: it answers again, or (a failover) its promoted replica serves its slots
SLOW_LINE = re.compile(r"^(\S+ \S+) WARNING streams\.slow_slots Redis master (\S+?):? (has not answered|answers again|its partitions are served by)", re.M)


def slow_lines(log: str) -> dict[str, list[tuple[float, str]]]:
    """Each master's slow-master lines: (epoch seconds, "slow" or "again")."""
    found: dict[str, list[tuple[float, str]]] = {}
    for stamp, master, kind in SLOW_LINE.findall(log):
        at = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()
        found.setdefault(master, []).append((at, "slow" if kind == "has not answered" else "again"))
    return found


@pytest.fixture
def own_cluster() -> Iterator[LocalCluster]:
    with placed_cluster(PARTITIONS) as local:
        yield local


async def test_a_hung_master_is_logged_at_the_first_timed_out_call_once_and_its_end_once(own_cluster: LocalCluster, tmp_path: Path) -> None:
    prefix = f"c{uuid.uuid4().hex[:12]}"
    keys = Keys(prefix)
    url = own_cluster.listed_url()
    workers = WorkerFactory(f"{url}?socket_timeout={SOCKET_TIMEOUT_S}", prefix, tmp_path, env={"STREAMCREW_PARTITIONS": str(PARTITIONS)})
    redis = await connect_detected(url)
    hung = own_cluster.master_of_slot(key_slot(partition_keys(keys, PARTITIONS)[0].results.encode()))
    process = own_cluster.nodes[hung]
    resume = threading.Timer(STALL_S, os.kill, (process.pid, signal.SIGCONT))  # a thread: resumed even if the test fails
    try:
        # Given a worker of every partition that has run jobs of all of them
        worker = workers.start("--concurrency", "10")
        await Producer(redis, keys, partitions=PARTITIONS).publish_many([JobRequest(agent="echo", data={}, id=f"j-{i}") for i in range(30)])
        await wait_all_results(redis, keys, 30, timeout=30)

        # When one master hangs for a few seconds
        os.kill(process.pid, signal.SIGSTOP)
        frozen_at = time.time()
        resume.start()

        # Then the worker says so within one socket timeout, once for the master (it serves two partitions)
        name = f"127.0.0.1:{hung}"
        await wait_until(lambda: name in slow_lines(worker.log_text()), timeout=3 * SOCKET_TIMEOUT_S + 10,
                         what=f"a slow-master line for {name}")
        warned_at = slow_lines(worker.log_text())[name][0][0]
        assert warned_at - frozen_at < WARNED_WITHIN_S, (warned_at - frozen_at, worker.log_text()[-4000:])
        # And once more when it (or its promoted replica, which then serves its slots) answers again, whatever the tries
        # in between
        await wait_until(lambda: len(slow_lines(worker.log_text()).get(name, [])) >= 2, timeout=30, what=f"{name}'s end line")
        # (another master may have a spell too: while the failover is under way the cluster answers CLUSTERDOWN everywhere,
        # and a loaded machine answers late; its end can come after the hung one's)
        await wait_until(lambda: all(len(v) >= 2 for v in slow_lines(worker.log_text()).values()), timeout=30,
                         what="the end line of every master that had a spell")
        lines = slow_lines(worker.log_text())
        assert {m: [kind for _, kind in v] for m, v in lines.items()} == {m: ["slow", "again"] for m in lines}, lines
        # (its calls are unanswered until they time out: the end comes with the failover, or the resume)
        assert lines[name][1][0] - frozen_at >= SOCKET_TIMEOUT_S - 0.3, (frozen_at, lines)
        resume.join()
        # And each loop that met the hang logged one line when it began and one when it ended, none per retry
        # (jobs still run afterwards: every loop has passed the hang)
        await Producer(redis, keys, partitions=PARTITIONS).publish_many([JobRequest(agent="echo", data={}, id=f"after-{i}") for i in range(30)])
        await wait_all_results(redis, keys, 60, timeout=30)
        log = worker.log_text()
        lines = outage_lines(log)
        assert {k: [kind for _, kind, _ in v] for k, v in lines.items()} == {k: ["unavailable", "back"] for k in lines}, log[-4000:]
        assert worker.alive(), log[-3000:]
    finally:
        resume.cancel()
        os.kill(process.pid, signal.SIGCONT)
        workers.close()
        await redis.aclose()
