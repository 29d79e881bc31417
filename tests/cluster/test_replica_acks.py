"""STREAMCREW_REPLICA_ACKS on the cluster: a settle batch WAITs on the connection that wrote it.

A cluster node's client pool hands out its free connections in turn, so a WAIT sent as a command of
its own lands on another connection than the settle, whose writes it does not count: it would
return at once. With the partition master's replica SIGSTOPped, a batch must wait the whole timeout.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time

from redis.asyncio import Redis
from redis.crc import key_slot

from streams.keys import Keys, partition_keys
from streams.settle import WAIT_TIMEOUT_MS, Settler, done_op
from tests.cluster.conftest import PARTITIONS
from tests.cluster_support import LocalCluster


async def test_a_settle_batch_waits_for_the_partition_masters_stopped_replica(
    cluster: LocalCluster, cluster_redis: Redis, cluster_prefix: str, caplog,
) -> None:
    partitions = partition_keys(Keys(cluster_prefix), PARTITIONS)
    # (a settler of partitions 3-5, as a worker given --partitions 3-5 has: the log names partitions by number)
    settler = Settler(cluster_redis, partitions[3:], group="workers", max_result_bytes=1_048_576, job_ttl_s=60,
                      release=lambda s, e, settled=True: None, replica_acks=1)
    p0 = partitions[3]
    replica = cluster.nodes[cluster.online_replica_of(cluster.master_of_slot(key_slot(p0.results.encode())))]
    # Given the partition master's pool holding several connections (as a busy worker's does)
    await asyncio.gather(*(cluster_redis.xlen(p0.results) for _ in range(4)))
    # And a master that does not know the settle script (NOSCRIPT: loaded, then the pipeline sent again)
    with cluster.client(cluster.master_of_slot(key_slot(p0.results.encode()))) as c:
        c.script_flush()
    # And its replica stopped, so it acknowledges nothing
    os.kill(replica.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="streams.replicated"):
            wrote = await settler._write([done_op(p0.lane("normal"), "1-0", "normal/1-0", "j1", {"id": "j1", "status": "completed"}, None)])
        waited = time.monotonic() - started
    finally:
        os.kill(replica.pid, signal.SIGCONT)
    # Then the batch is written and counted only after WAIT timed out
    assert wrote == [True]
    assert waited >= WAIT_TIMEOUT_MS / 1000 * 0.9, f"the settle batch returned after {waited:.3f}s without waiting for the replica"
    assert "settle batches of partition 3 acknowledged by 0 of 1 replicas" in caplog.text, caplog.text
    cluster.wait_ok()
