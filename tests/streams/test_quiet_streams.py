"""Higher streams read empty are watched (streams.quiet), not read again before every read below them."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import redis as sync_redis
from redis.asyncio import Redis

from streams.embedded import RedisServer
from streams.keys import Keys
from streams.quiet import QuietStreams
from streams.runtime import Entry, GroupRuntime, Slot
from tests.support import serving, wait_until

PARTITIONS = 6


class Recording:
    """Records each batch; frees each slot at once unless ``holding``."""

    def __init__(self, runtime: GroupRuntime, *, holding: bool = False) -> None:
        self.runtime = runtime
        self.holding = holding
        self.batches: list[tuple[str, list[str]]] = []
        runtime.handler = self

    async def on_entries(self, stream: str, entries: list[Entry], *, reclaimed: bool) -> None:
        self.batches.append((stream, [eid for eid, _ in entries]))
        if not self.holding:
            for eid, _ in entries:
                self.runtime.release(stream, eid)

    async def hand_back(self, slots: list[Slot]) -> None:
        pass

    async def tick(self) -> None:
        pass


@contextlib.asynccontextmanager
async def running(redis: Redis, prefix: str, *, holding: bool = False, watch_block_ms: int | None = None) -> AsyncIterator[Recording]:
    """A runtime of one slot over 6 partitions' high then normal streams, on their own slots' order."""
    high = [f"{prefix}:{{{p}}}:high" for p in range(PARTITIONS)]
    normal = [f"{prefix}:{{{p}}}:normal" for p in range(PARTITIONS)]
    for stream in high + normal:
        await redis.xgroup_create(stream, "g", id="0", mkstream=True)
    runtime = GroupRuntime(redis, streams=high + normal, level_size=PARTITIONS, group="g", consumer="me", concurrency=1,
                           lease_s=30, block_ms=200)
    if watch_block_ms is not None:
        runtime.quiet = QuietStreams(redis, "g", lambda s: 0, block_ms=watch_block_ms)
    handler = Recording(runtime, holding=holding)
    async with serving(runtime):
        yield handler


async def test_a_normal_backlog_is_read_without_rereading_every_empty_high_lane(own_redis: RedisServer, keys: Keys) -> None:
    # Given 6 partitions whose normal lanes hold 60 entries and whose high lanes are empty, on a Redis of the test's own
    redis = Redis.from_url(own_redis.url, decode_responses=True)
    for n in range(60):
        await redis.xadd(f"{keys.prefix}:{{{n % PARTITIONS}}}:normal", {"n": str(n)})
    with sync_redis.Redis.from_url(own_redis.url) as admin:
        admin.config_resetstat()
    # When a runtime of one slot reads them all, one entry per read
        async with running(redis, keys.prefix) as handler:
            await wait_until(lambda: len(handler.batches) == 60, timeout=20, what="all 60 entries read")
        reads = admin.info("commandstats")["cmdstat_xreadgroup"]["calls"]
    await redis.aclose()
    # Then the empty high lanes were read about once, not 6 times before each of the 60 reads (7 x 60 = 420 reads)
    assert reads <= 60 + 3 * PARTITIONS, f"{reads} XREADGROUP calls for 60 entries"


async def test_a_high_entry_ends_the_watch_and_is_read_next(redis: Redis, keys: Keys) -> None:
    # Given a runtime of one slot busy with a normal backlog, its high lanes watched (a watch lasting a minute)
    for n in range(10):
        await redis.xadd(f"{keys.prefix}:{{{n % PARTITIONS}}}:normal", {"n": str(n)})
    async with running(redis, keys.prefix, holding=True, watch_block_ms=60_000) as handler:
        await wait_until(lambda: len(handler.batches) == 1, timeout=10, what="the first entry")
        high = f"{keys.prefix}:{{3}}:high"
        await wait_until(lambda: handler.runtime.quiet.quiet(high), timeout=10, what="the high lanes watched")
        # When an entry arrives in one partition's high lane
        await redis.xadd(high, {"n": "urgent"})
        # Then the watch ends at once (not after its minute) and the next read takes the high entry
        await wait_until(lambda: not handler.runtime.quiet.quiet(high), timeout=10, what="the watch to end on the new entry")
        stream, eids = handler.batches[0]
        handler.runtime.release(stream, eids[0])
        await wait_until(lambda: len(handler.batches) == 2, timeout=10, what="the next read")
        assert handler.batches[1][0] == high


async def test_a_failed_watch_leaves_its_streams_to_be_read(redis: Redis, keys: Keys) -> None:
    # Given a watch of a stream that does not exist (XINFO GROUPS fails)
    quiet = QuietStreams(redis, "g", lambda s: 0, block_ms=60_000)
    missing = f"{keys.prefix}:missing"
    quiet.watch([missing])
    # Then the watch ends and the stream is read again, not skipped for the watch's minute
    await wait_until(lambda: not quiet.quiet(missing), timeout=10, what="the failed watch to end")
    await quiet.close()
