"""A runtime with ``refill`` reads a full pool again only once several slots are free; an idle pool reads at once."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from redis.asyncio import Redis

from streams.keys import Keys
from streams.runtime import Entry, GroupRuntime, Slot
from tests.support import serving, wait_until


CONCURRENCY = 10
REFILL = 5


class Holding:
    """An entry handler that holds every slot until the test releases it, and records each batch it was given."""

    def __init__(self, runtime: GroupRuntime) -> None:
        self.runtime = runtime
        self.batches: list[list[str]] = []
        runtime.handler = self

    async def on_entries(self, stream: str, entries: list[Entry], *, reclaimed: bool) -> None:
        self.batches.append([eid for eid, _ in entries])

    async def hand_back(self, slots: list[Slot]) -> None:
        pass

    async def tick(self) -> None:
        pass

    @property
    def held(self) -> list[str]:
        return [eid for batch in self.batches for eid in batch]


@contextlib.asynccontextmanager
async def running(redis: Redis, stream: str, *, refill_wait_s: float) -> AsyncIterator[Holding]:
    runtime = GroupRuntime(redis, streams=[stream], group="g", consumer="me", concurrency=CONCURRENCY, lease_s=30,
                           block_ms=200, refill=REFILL, refill_wait_s=refill_wait_s)
    await redis.xgroup_create(stream, "g", id="0", mkstream=True)
    handler = Holding(runtime)
    async with serving(runtime):
        yield handler


@contextlib.asynccontextmanager
async def full_pool(redis: Redis, stream: str, *, refill_wait_s: float) -> AsyncIterator[Holding]:
    """A backlog of 30 entries and a running runtime whose 10 slots it has filled."""
    for n in range(30):
        await redis.xadd(stream, {"n": str(n)})
    async with running(redis, stream, refill_wait_s=refill_wait_s) as handler:
        await wait_until(lambda: len(handler.held) == CONCURRENCY, timeout=10, what="the pool to fill")
        yield handler


async def test_a_full_pool_is_read_again_once_refill_slots_are_free(redis: Redis, keys: Keys) -> None:
    # Given a backlog of 30 entries and a runtime of 10 slots that refills at 5 (waiting up to a minute for them)
    stream = f"{keys.prefix}:refill"
    async with full_pool(redis, stream, refill_wait_s=60.0) as handler:
        # When its slots are freed one by one
        for eid in handler.held[:REFILL]:
            handler.runtime.release(stream, eid)
            await asyncio.sleep(0)
        # Then the next read comes once 5 are free, and takes all 5 in one
        await wait_until(lambda: len(handler.batches) > 1, timeout=10, what="the next read")
        assert [len(b) for b in handler.batches] == [CONCURRENCY, REFILL]


async def test_a_full_pool_is_read_again_after_refill_wait_with_fewer_free(redis: Redis, keys: Keys) -> None:
    # Given the same backlog and a runtime that waits at most 0.2 s for 5 free slots
    stream = f"{keys.prefix}:refill"
    async with full_pool(redis, stream, refill_wait_s=0.2) as handler:
        # When one slot is freed
        handler.runtime.release(stream, handler.held[0])
        # Then it is read again within the wait, for the one
        await wait_until(lambda: len(handler.batches) > 1, timeout=5, what="the read after the wait")
        assert [len(b) for b in handler.batches] == [CONCURRENCY, 1]


async def test_an_idle_pool_reads_a_new_entry_at_once(redis: Redis, keys: Keys) -> None:
    # Given an idle runtime that refills at 5 with a wait of a minute
    stream = f"{keys.prefix}:refill"
    async with running(redis, stream, refill_wait_s=60.0) as handler:
        # When one entry arrives, and later another while the first is still held
        await redis.xadd(stream, {"n": "0"})
        await wait_until(lambda: len(handler.held) == 1, timeout=5, what="the first entry")
        await redis.xadd(stream, {"n": "1"})
        # Then each is read at once: the pool has room, so nothing waits for slots
        await wait_until(lambda: len(handler.held) == 2, timeout=5, what="the second entry")


async def test_slots_taken_by_a_reclaim_during_the_refill_wait_leave_the_reader_waiting(redis: Redis, keys: Keys) -> None:
    # Given a full pool of 10 that refills at 5 (waiting up to 0.3 s), and an entry a dead consumer left idle for a minute
    stream = f"{keys.prefix}:refill"
    async with full_pool(redis, stream, refill_wait_s=0.3) as handler:
        reply = await redis.xreadgroup("g", "dead", {stream: ">"}, count=1)
        stale = reply[0][1][0][0]
        await redis.xclaim(stream, "g", "dead", 0, [stale], idle=60_000)
        # When one slot is freed, and a reclaim takes it back while the reader waits for 5
        handler.runtime.release(stream, handler.held[0])
        # (XAUTOCLAIM scans 10 PEL entries per claimable one: the second sweep gets past the pool's own entries)
        assert [await handler.runtime.leases.sweep() for _ in range(2)] == [0, 1]
        assert handler.runtime.free_slots() == 0
        await asyncio.sleep(0.5)  # past the refill wait: the reader finds no free slot at all
        # Then the reader is still there, and reads once 5 slots are free again
        for eid in handler.held[1:6]:
            handler.runtime.release(stream, eid)
        await wait_until(lambda: len(handler.held) == 16, timeout=5, what="the read after the reclaim")
        assert [len(b) for b in handler.batches] == [CONCURRENCY, 1, REFILL]
