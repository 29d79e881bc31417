"""A read Redis served but whose reply never arrived leaves entries pending under the consumer: it takes them up
soon, not after the whole lease (the cluster client drops its connections on a reshard's MOVED or a failover)."""

from __future__ import annotations

import asyncio
from redis.asyncio import Redis

from streams.runtime import Entry, GroupRuntime, Slot
from tests.support import wait_until


class Holding:
    """Holds every entry it is given (its work never ends), recording how each came."""

    def __init__(self, runtime: GroupRuntime) -> None:
        self.got: list[tuple[str, bool]] = []
        runtime.handler = self

    async def on_entries(self, stream: str, entries: list[Entry], *, reclaimed: bool) -> None:
        self.got += [(eid, reclaimed) for eid, _ in entries]

    async def hand_back(self, slots: list[Slot]) -> None:
        pass

    async def tick(self) -> None:
        pass


async def test_entries_of_a_lost_reply_are_taken_up_before_their_lease_runs_out(redis: Redis) -> None:
    # Given entries read under a consumer's name whose reply was lost (here: read by another client as "me")
    stream = "lost-reply:lane"
    await redis.xgroup_create(stream, "g", id="0", mkstream=True)
    lost = [await redis.xadd(stream, {"n": f"lost-{i}"}) for i in range(3)]
    reply = await redis.xreadgroup("g", "me", {stream: ">"}, count=10)
    assert [eid for eid, _ in reply[0][1]] == lost
    # And a runtime of that consumer, with a 30 s lease, that reads two more itself
    runtime = GroupRuntime(redis, streams=[stream], group="g", consumer="me", concurrency=10, lease_s=30, block_ms=100)
    handler = Holding(runtime)
    held = [await redis.xadd(stream, {"n": str(i)}) for i in range(2)]
    task = asyncio.create_task(runtime.run())
    try:
        await wait_until(lambda: len(handler.got) >= 2, timeout=10, what="the runtime's own read")
        # Then it takes the lost ones up at its first sweep (10 s in), as fresh work, not as a reclaim after the
        # 30 s lease; the two it holds (idle past 2 s by then too) are not handed on twice
        await wait_until(lambda: len(handler.got) >= 5, timeout=20, what="the lost reply's entries to be taken up")
        assert handler.got == [(eid, False) for eid in held + lost]
        assert runtime.in_flight == 5
    finally:
        runtime.stop_accepting()
        await asyncio.gather(task, return_exceptions=True)
        await runtime.stop_helpers()


async def test_a_read_giving_more_than_the_free_slots_never_holds_more_than_the_concurrency(redis: Redis) -> None:
    # Given a runtime with one slot (30 s lease: its sweep runs every 10 s), holding the one entry it read
    stream = "over-read:lane"
    await redis.xgroup_create(stream, "g", id="0", mkstream=True)
    runtime = GroupRuntime(redis, streams=[stream], group="g", consumer="me", concurrency=1, lease_s=30, block_ms=100)
    handler = Holding(runtime)
    first = await redis.xadd(stream, {"n": "first"})
    task = asyncio.create_task(runtime.run())
    try:
        await wait_until(lambda: len(handler.got) == 1, timeout=10, what="the first entry")
        # When it is handed three more its read took (blocking reads on several cluster slots at once can do that)
        extra = [await redis.xadd(stream, {"n": str(i)}) for i in range(3)]
        reply = await redis.xreadgroup("g", "me", {stream: ">"}, count=10)
        await runtime.deliver(stream, reply[0][1], reclaimed=False)
        # Then none of them is held beyond the one slot
        assert runtime.in_flight == 1 and handler.got == [(first, False)]
        # And as each slot frees (settled: acked, then released), the next goes at once, in order, as fresh work,
        # well before the sweep could take it up
        for done, following in zip([first, *extra], extra, strict=False):
            await redis.xack(stream, "g", done)
            runtime.release(stream, done)
            await wait_until(lambda f=following: (f, False) in handler.got, timeout=5, what=f"{following} after {done}")
            assert runtime.in_flight == 1
        assert handler.got == [(eid, False) for eid in [first, *extra]]
    finally:
        runtime.stop_accepting()
        await asyncio.gather(task, return_exceptions=True)
        await runtime.stop_helpers()
