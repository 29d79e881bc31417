"""A process started on a Redis Cluster that does not serve every slot yet (the nodes up, `redis-cli --cluster
create` still to run: compose and Kubernetes start both at once) waits for it like for a Redis that is down,
instead of exiting with redis-py's "All slots are not covered" traceback; a one-shot command says so in one line."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as sync_redis

from consumers.processes import streamcrew_cmd
from streams.embedded import RedisServer
from tests.cluster_support import cluster_binaries, cluster_port
from tests.support import WorkerFactory, wait_for_log


@pytest.fixture
def bare_node(tmp_path: Path) -> Iterator[RedisServer]:
    """One cluster-enabled node that owns no slot yet."""
    binaries = cluster_binaries()
    if binaries is None:
        pytest.skip("needs redis-server and redis-cli on PATH")
    # A port at most 55535 with its bus port (+10000) free: any free port failed now and then ("port number too high")
    node = RedisServer(binaries[0], port=cluster_port(), directory=str(tmp_path / "node"), extra_args=["--cluster-enabled", "yes"])
    (tmp_path / "node").mkdir()
    node.start()
    yield node
    node.close()


def test_a_worker_waits_for_the_slots_and_a_command_says_so(bare_node: RedisServer, tmp_path: Path) -> None:
    stats = subprocess.run(streamcrew_cmd("stats", "--redis-url", bare_node.url), capture_output=True, text=True, timeout=60,
                           env={**os.environ, "STREAMCREW_PARTITIONS": "1"})
    assert stats.returncode == 4 and "Traceback" not in stats.stderr, stats.stderr
    assert "Redis unavailable (SlotNotCoveredError" in " ".join(stats.stderr.split()), stats.stderr
    workers = WorkerFactory(bare_node.url, "uncovered", tmp_path)
    try:
        # Given a worker started before the cluster serves its slots
        worker = workers.start(wait_ready=False)
        wait_for_log(worker, "worker start: Redis unavailable (SlotNotCoveredError", timeout=60)
        # When the node takes every slot (what --cluster create does)
        with sync_redis.Redis.from_url(bare_node.url) as node:
            node.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
        # Then the same process starts serving
        wait_for_log(worker, " ready: ", timeout=60)
        assert worker.alive() and "Traceback" not in worker.log_text(), worker.log_text()[-3000:]
    finally:
        workers.close()
