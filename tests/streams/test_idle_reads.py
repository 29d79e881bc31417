"""An idle runtime waits in blocking reads, not in a read of every stream per block (streams.runtime).

A blocking read of '>' that comes back empty saw every stream it waits on empty for its whole wait: before, the loop
read each stream again (a strict pass) before blocking again, so an idle worker sent one read per stream per block.
"""

from __future__ import annotations

import asyncio
import time

import redis as sync_redis
from redis.asyncio import Redis

from streams.embedded import RedisServer
from streams.keys import Keys
from streams.runtime import GroupRuntime
from tests.streams.test_quiet_streams import PARTITIONS, Recording
from tests.support import serving, wait_until

BLOCK_MS = 200
WINDOW_S = 1.2


def read_calls(admin: sync_redis.Redis) -> int:
    return int(admin.info("commandstats").get("cmdstat_xreadgroup", {}).get("calls", 0))


async def test_an_idle_runtime_sends_one_read_per_block(own_redis: RedisServer, keys: Keys) -> None:
    # Given a runtime over 6 partitions' high and normal lanes (12 streams) on a Redis of the test's own, idle
    redis = Redis.from_url(own_redis.url, decode_responses=True)
    streams = [f"{keys.prefix}:{{{p}}}:{lane}" for lane in ("high", "normal") for p in range(PARTITIONS)]
    for stream in streams:
        await redis.xgroup_create(stream, "g", id="0", mkstream=True)
    runtime = GroupRuntime(redis, streams=streams, level_size=PARTITIONS, group="g", consumer="me", concurrency=10,
                           lease_s=30, block_ms=BLOCK_MS)
    handler = Recording(runtime)
    with sync_redis.Redis.from_url(own_redis.url) as admin:
        async with serving(runtime):
            await wait_until(lambda: read_calls(admin) >= len(streams) + 1, timeout=10, what="the first strict pass and a block")
            # When it stays idle for a window of several blocks (an observation window: nothing happens in it to await)
            before, started = read_calls(admin), time.monotonic()
            await asyncio.sleep(WINDOW_S)
            calls, elapsed = read_calls(admin) - before, time.monotonic() - started
            # Then it sent about one read per block, where a strict pass per block sent 13 (12 streams, then the block)
            blocks = elapsed * 1000 / BLOCK_MS
            assert calls <= blocks + 2, f"{calls} XREADGROUP calls in {elapsed:.2f} s of idling ({blocks:.1f} blocks)"
            # And entries that come after are still read as they come
            await redis.xadd(streams[PARTITIONS + 2], {"n": "1"})  # a normal lane
            await wait_until(lambda: len(handler.batches) == 1, timeout=10, what="the entry added while idle")
            await redis.xadd(streams[1], {"n": "2"})  # a high lane, after the loop went idle again
            await wait_until(lambda: len(handler.batches) == 2, timeout=10, what="the second entry")
    await redis.aclose()
    assert handler.batches[1][0] == streams[1]
