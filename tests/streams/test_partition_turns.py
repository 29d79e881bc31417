"""Streams of one priority level (one per partition) take turns: a backlog in one never starves the others."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

from streams.keys import Keys
from streams.runtime import Entry, GroupRuntime, Slot
from tests.support import serving, wait_until

CONCURRENCY = 4


class Releasing:
    """An entry handler that records the stream of each read, in order, and frees each slot at once."""

    def __init__(self, runtime: GroupRuntime) -> None:
        self.runtime = runtime
        self.reads: list[str] = []
        self.entries = 0
        runtime.handler = self

    async def on_entries(self, stream: str, entries: list[Entry], *, reclaimed: bool) -> None:
        self.reads.append(stream)
        self.entries += len(entries)
        for eid, _ in entries:
            asyncio.get_running_loop().call_soon(self.runtime.release, stream, eid)

    async def hand_back(self, slots: list[Slot]) -> None:
        pass

    async def tick(self) -> None:
        pass


async def test_partitions_of_one_lane_take_turns_below_a_higher_lane(redis: Redis, keys: Keys) -> None:
    high, p0, p1 = (f"{keys.prefix}:{name}" for name in ("high", "normal-p0", "normal-p1"))
    # Given 5 entries in a higher level, then a backlog of 40 in each of two partitions' streams of the next level
    for stream, n in ((high, 5), (p0, 40), (p1, 40)):
        await redis.xgroup_create(stream, "g", id="0", mkstream=True)
        for i in range(n):
            await redis.xadd(stream, {"n": str(i)})
    runtime = GroupRuntime(redis, streams=[high, high + "-p1", p0, p1], level_size=2, group="g", consumer="me",
                           concurrency=CONCURRENCY, lease_s=30, block_ms=100)
    await redis.xgroup_create(high + "-p1", "g", id="0", mkstream=True)
    handler = Releasing(runtime)
    async with serving(runtime):
        # When one consumer with 4 slots reads them all
        await wait_until(lambda: handler.entries == 85, timeout=20, what="all 85 entries to be read")
    # Then the higher level went first, and the two partitions' backlogs were read in turn, not one after the other
    first_normal = handler.reads.index(p0)
    assert set(handler.reads[:first_normal]) == {high}
    turns = handler.reads[first_normal:]
    assert turns[:10] == [p0, p1] * 5, turns


def test_a_level_size_must_divide_the_streams(redis: Redis) -> None:
    with pytest.raises(ValueError, match="level_size 2 does not divide the 3 streams"):
        GroupRuntime(redis, streams=["a", "b", "c"], level_size=2, group="g", consumer="me", concurrency=1, lease_s=30)


async def test_a_high_entry_goes_before_low_entries_a_read_gave_beyond_the_free_slots(redis: Redis, keys: Keys) -> None:
    high = [f"{keys.prefix}:{{{p}}}:high" for p in range(2)]
    low = [f"{keys.prefix}:{{{p}}}:low" for p in range(2)]
    for stream in high + low:
        await redis.xgroup_create(stream, "g", id="0", mkstream=True)
    runtime = GroupRuntime(redis, streams=high + low, level_size=2, group="g", consumer="me", concurrency=1, lease_s=30, block_ms=100)
    handler = Holding(runtime)
    # Given a worker of one slot whose blocking read found a low entry in each of two partitions (they came between its
    # non-blocking reads and the blocking one; on a cluster the slots' blocking reads return side by side): one runs,
    # the other waits under this consumer, beyond the free slots
    for stream in low:
        await redis.xadd(stream, {"n": "low"})
    await runtime._read_blocking()
    assert [s for s, _ in handler.batches] == [low[0]] and low[1] in runtime.leftover, (handler.batches, runtime.leftover)
    # When a high entry arrives in another partition while the low one runs, and the low one then ends
    await redis.xadd(high[1], {"n": "high"})
    async with serving(runtime):
        runtime.release(*handler.batches[0])
        await wait_until(lambda: len(handler.batches) == 2, timeout=10, what="the next entry taken once the slot was free")
        # Then the high entry runs next, not the low one already read (strict priority across partitions)
        assert handler.batches[1][0] == high[1], handler.batches
        runtime.release(*handler.batches[1])
        await wait_until(lambda: len(handler.batches) == 3, timeout=10, what="the low entry after the high one")
        assert handler.batches[2][0] == low[1], handler.batches


class Holding(Releasing):
    """Records each batch's (stream, first entry ID) and holds its slot until the test releases it."""

    def __init__(self, runtime: GroupRuntime) -> None:
        super().__init__(runtime)
        self.batches: list[tuple[str, str]] = []

    async def on_entries(self, stream: str, entries: list[Entry], *, reclaimed: bool) -> None:
        self.batches += [(stream, eid) for eid, _ in entries]
