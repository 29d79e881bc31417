"""Entries pending under a runtime's consumer that no slot holds: a read Redis served whose reply never arrived
(the cluster client drops its connections on a reshard's MOVED or a failover) is taken up soon, not after the
whole lease; what a read gave beyond the free slots goes first as slots free; what a handler lets go unsettled
waits for the lease."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
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


async def runtime_on(redis: Redis, stream: str, *, concurrency: int, lease_s: float) -> GroupRuntime:
    """A runtime of consumer "me" in group "g" over ``stream`` (created empty)."""
    await redis.xgroup_create(stream, "g", id="0", mkstream=True)
    return GroupRuntime(redis, streams=[stream], group="g", consumer="me", concurrency=concurrency, lease_s=lease_s, block_ms=100)


@asynccontextmanager
async def running(runtime: GroupRuntime) -> AsyncIterator[None]:
    """The runtime reading, renewing and sweeping for the block; stopped after it."""
    task = asyncio.create_task(runtime.run())
    try:
        yield
    finally:
        runtime.stop_accepting()
        await asyncio.gather(task, return_exceptions=True)
        await runtime.stop_helpers()


async def test_entries_of_a_lost_reply_are_taken_up_before_their_lease_runs_out(redis: Redis) -> None:
    # Given a runtime of consumer "me" with a 30 s lease, and entries read under its name whose reply was lost
    # (here: read by another client as "me" before it starts)
    stream = "lost-reply:lane"
    runtime = await runtime_on(redis, stream, concurrency=10, lease_s=30)
    lost = [await redis.xadd(stream, {"n": f"lost-{i}"}) for i in range(3)]
    reply = await redis.xreadgroup("g", "me", {stream: ">"}, count=10)
    assert [eid for eid, _ in reply[0][1]] == lost
    # And two more it reads itself
    handler = Holding(runtime)
    held = [await redis.xadd(stream, {"n": str(i)}) for i in range(2)]
    async with running(runtime):
        await wait_until(lambda: len(handler.got) >= 2, timeout=10, what="the runtime's own read")
        # Then it takes the lost ones up at its first sweep (10 s in), as fresh work, not as a reclaim after the
        # 30 s lease; the two it holds (idle past 2 s by then too) are not handed on twice
        await wait_until(lambda: len(handler.got) >= 5, timeout=20, what="the lost reply's entries to be taken up")
        assert handler.got == [(eid, False) for eid in held + lost]
        assert runtime.in_flight == 5


async def test_a_read_giving_more_than_the_free_slots_never_holds_more_than_the_concurrency(redis: Redis) -> None:
    # Given a runtime with one slot (30 s lease: its sweep runs every 10 s), holding the one entry it read
    stream = "over-read:lane"
    runtime = await runtime_on(redis, stream, concurrency=1, lease_s=30)
    handler = Holding(runtime)
    first = await redis.xadd(stream, {"n": "first"})
    async with running(runtime):
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


class LettingGo(Holding):
    """Lets every entry go unsettled (as the Kafka bridge does when Kafka refuses a send)."""

    def __init__(self, runtime: GroupRuntime) -> None:
        super().__init__(runtime)
        self.runtime = runtime

    async def on_entries(self, stream: str, entries: list[Entry], *, reclaimed: bool) -> None:
        await super().on_entries(stream, entries, reclaimed=reclaimed)
        for eid, _ in entries:
            self.runtime.release(stream, eid, settled=False)


async def test_an_entry_a_handler_lets_go_unsettled_is_left_to_the_lease(redis: Redis) -> None:
    # Given a runtime (6 s lease: sweeps every 3 s, orphans taken up after 2 s idle) whose handler lets go unsettled
    stream = "let-go:lane"
    runtime = await runtime_on(redis, stream, concurrency=2, lease_s=6)
    handler = LettingGo(runtime)
    entry = await redis.xadd(stream, {"n": "1"})
    async with running(runtime):
        await wait_until(lambda: len(handler.got) == 1, timeout=10, what="the first delivery")
        # When sweeps run while it is pending (idle past 2 s, held by no slot)
        await wait_until(lambda: len(handler.got) == 2, timeout=20, what="the sweep to reclaim it after the lease")
        # Then it came again only as a reclaim after the 6 s lease, not as a lost read's entry at the first sweep
        assert handler.got == [(entry, False), (entry, True)]


async def test_the_drain_lets_what_a_read_gave_beyond_the_free_slots_go_at_once(redis: Redis) -> None:
    # Given a runtime with one slot that was handed three entries (one held, two left over, pending under it)
    stream = "drain-leftover:lane"
    runtime = await runtime_on(redis, stream, concurrency=1, lease_s=60)
    Holding(runtime)
    ids = [await redis.xadd(stream, {"n": str(i)}) for i in range(3)]
    reply = await redis.xreadgroup("g", "me", {stream: ">"}, count=3)
    await runtime.deliver(stream, reply[0][1], reclaimed=False)
    assert runtime.in_flight == 1 and [eid for eid, _ in runtime.leftover[stream]] == ids[1:]
    # When it drains
    await runtime.drain(0.1)
    # Then the two left over look idle past the lease: another consumer's next sweep takes them, not after 60 s
    pending = {p["message_id"]: p["time_since_delivered"] for p in await redis.xpending_range(stream, "g", min="-", max="+", count=10)}
    assert all(pending[eid] > 60_000 for eid in ids[1:]), pending
    taken = await redis.xautoclaim(stream, "g", "other", 60_000, "0-0", count=10)
    assert set(ids[1:]) <= {eid for eid, _ in taken[1]}


class Working:
    """Starts a task per entry that runs until the test ends it."""

    def __init__(self, runtime: GroupRuntime) -> None:
        self.runtime = runtime
        self.ends: dict[str, asyncio.Event] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}
        runtime.handler = self

    async def on_entries(self, stream: str, entries: list[Entry], *, reclaimed: bool) -> None:
        for eid, _ in entries:
            self.ends[eid] = asyncio.Event()
            self.tasks[eid] = asyncio.create_task(self.ends[eid].wait())
            self.runtime.attach(stream, eid, self.tasks[eid])

    async def hand_back(self, slots: list[Slot]) -> None:
        pass

    async def tick(self) -> None:
        pass

    async def taken_over(self, slots: list[Slot]) -> None:
        pass


async def test_a_renewal_reports_as_taken_over_only_entries_still_at_work(redis: Redis, caplog: pytest.LogCaptureFixture) -> None:
    # Given a runtime holding two entries
    stream = "renew-report:lane"
    runtime = await runtime_on(redis, stream, concurrency=10, lease_s=30)
    handler = Working(runtime)
    done, taken = [await redis.xadd(stream, {"n": str(i)}) for i in range(2)]
    async with running(runtime):
        await wait_until(lambda: len(handler.tasks) == 2, timeout=10, what="the runtime to read both entries")
        # When the first one's work ends and its settle is written (acked) while the slot still waits for the
        # settle's reply, and another consumer takes the second over while its work runs
        handler.ends[done].set()
        await handler.tasks[done]
        assert await redis.xack(stream, "g", done) == 1
        assert await redis.xclaim(stream, "g", "other", 0, [taken], justid=True) == [taken]
        with caplog.at_level(logging.INFO, logger="streams.leases"):
            lost = await runtime.leases.renew()
            again = await runtime.leases.renew()
        # Then only the second is reported taken over: the first was settled by us, not lost; and it is reported
        # once, though every renewal finds it (and tells the handler) while its work runs
        assert lost == again == [(stream, taken)]
        assert caplog.text.count("entries still at work here were taken over by another consumer") == 1, caplog.text
        assert "1 entries still at work here were taken over by another consumer" in caplog.text
        handler.ends[taken].set()


async def test_a_stream_whose_renewal_fails_does_not_stop_the_others_being_renewed(redis: Redis) -> None:
    """On a cluster with one shard down (or a group gone), the runs held on the other partitions keep their leases:
    before, the first stream's failure ended the renewal, and they were taken over and run again."""
    # Given a runtime holding an entry of each of two streams, both idle for long (as after a few skipped renewals)
    first, second = "renew-apart:a", "renew-apart:b"
    for stream in (first, second):
        await redis.xgroup_create(stream, "g", id="0", mkstream=True)
    runtime = GroupRuntime(redis, streams=[first, second], group="g", consumer="me", concurrency=10, lease_s=30, block_ms=100)
    handler = Working(runtime)
    ids = [await redis.xadd(stream, {"n": "1"}, id=eid) for stream, eid in ((first, "1-1"), (second, "1-2"))]  # Working keys by id
    async with running(runtime):
        await wait_until(lambda: len(handler.tasks) == 2, timeout=10, what="the runtime to read both entries")
        assert [stream for stream, _ in runtime.held()] == [first, second]
        for stream, eid in zip((first, second), ids, strict=True):
            await redis.execute_command("XCLAIM", stream, "g", "me", 0, eid, "IDLE", 100_000, "JUSTID")
        # When the first stream's renewal fails (here: its key no longer a stream)
        await redis.delete(first)
        await redis.set(first, "not a stream")
        lost = await runtime.leases.renew()
        # Then the second stream's entry is renewed all the same, and the failure is kept for the loop to report
        (pending,) = await redis.xpending_range(second, "g", min="-", max="+", count=10)
        assert pending["time_since_delivered"] < 10_000, pending
        assert lost == [] and "WRONGTYPE" in str(runtime.leases.renew_failure), (lost, runtime.leases.renew_failure)
        for end in handler.ends.values():
            end.set()
