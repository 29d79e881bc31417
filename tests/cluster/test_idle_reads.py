"""An idle worker's runtime on the cluster waits in one blocking read per slot at a time, not in a read of every stream
of every partition each 100 ms block (streams.runtime; the single-Redis side: tests/streams/test_idle_reads.py)."""

from __future__ import annotations

import asyncio
import time

import redis as sync_redis
from redis.asyncio import Redis

from streams.runtime import CLUSTER_BLOCK_MS, GroupRuntime
from tests.cluster.conftest import PARTITIONS
from tests.cluster_support import LocalCluster
from tests.streams.test_quiet_streams import Recording
from tests.support import serving, wait_until

WINDOW_S = 1.5


def reads_per_master(cluster: LocalCluster) -> dict[int, int]:
    calls = {}
    for port in cluster.masters():
        with sync_redis.Redis(host="127.0.0.1", port=port) as c:
            calls[port] = int(c.info("commandstats").get("cmdstat_xreadgroup", {}).get("calls", 0))
    return calls


async def test_an_idle_runtime_sends_each_master_one_read_per_slot_per_block(
    cluster: LocalCluster, cluster_redis: Redis, cluster_prefix: str,
) -> None:
    # Given a runtime over the 6 placed partitions' high and normal lanes (two partitions, four streams, per master), idle
    streams = [f"{cluster_prefix}:{{{p}}}:requests:{lane}" for lane in ("high", "normal") for p in range(PARTITIONS)]
    for stream in streams:
        await cluster_redis.xgroup_create(stream, "workers", id="0", mkstream=True)
    runtime = GroupRuntime(cluster_redis, streams=streams, level_size=PARTITIONS, group="workers", consumer="me",
                           concurrency=10, lease_s=30)
    handler = Recording(runtime)
    start = reads_per_master(cluster)
    async with serving(runtime):
        await wait_until(lambda: sum(reads_per_master(cluster).values()) - sum(start.values()) >= len(streams) + PARTITIONS,
                         timeout=10, what="the first strict pass and a block on every slot")
        # When it stays idle for a window of several blocks (an observation window: nothing happens in it to await)
        before, started = reads_per_master(cluster), time.monotonic()
        await asyncio.sleep(WINDOW_S)
        after, elapsed = reads_per_master(cluster), time.monotonic() - started
        # Then each master got about one read per slot (2) per block, where a strict pass per block added 4 more
        blocks = elapsed * 1000 / CLUSTER_BLOCK_MS
        for port in before:
            calls = after[port] - before[port]
            assert calls <= 2 * (blocks + 2), f"master {port}: {calls} XREADGROUP calls in {elapsed:.2f} s ({blocks:.1f} blocks)"
        # And an entry that comes after is still read
        await cluster_redis.xadd(streams[PARTITIONS + 4], {"n": "1"})
        await wait_until(lambda: len(handler.batches) == 1, timeout=10, what="the entry added while idle")
    assert handler.batches[0][0] == streams[PARTITIONS + 4]
