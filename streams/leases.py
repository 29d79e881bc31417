"""Leases on pending entries: renewing those this consumer holds, and taking over those no live slot holds: a
stalled consumer's (XAUTOCLAIM after the lease), this consumer's own whose read reply was lost (XCLAIM after a
short idle time), and what a read gave beyond the free slots (first, as slots free). Also the group's upkeep of
consumers idle with nothing pending."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import TYPE_CHECKING, Any, cast

from streams.entries import Entry, Slot
from streams.outage import BACKOFF_MAX_S, REDIS_FAILED
from streams.slow_slots import SlotSlow

if TYPE_CHECKING:
    from streams.runtime import GroupRuntime

log = logging.getLogger(__name__)

RECLAIM_BATCH = 100
# An entry pending under this consumer, idle this long and held by no slot, came in a reply that never arrived.
ORPHAN_IDLE_S = 2.0


class Leases:
    """A runtime's lease keeping; a take-over never takes more entries than the runtime has free slots."""

    def __init__(self, runtime: GroupRuntime) -> None:
        self.runtime = runtime
        self._cursors = {s: "0-0" for s in runtime.streams}
        self._taking_up = asyncio.Lock()
        self._reported: set[Slot] = set()  # taken over, already in a warning: each renewal finds them again
        self._away = False  # a sweep met an outage: the next one waits for Redis to answer, then holds off
        self._hold_until = 0.0
        # What the last renewal met on a stream it could not renew; the other streams were renewed all the same
        self.renew_failure: BaseException | None = None

    async def renew(self) -> list[Slot]:
        """Reset the idle time of every held entry (XCLAIM ... JUSTID); returns those still at work here that
        another consumer took over.

        An entry whose work ended is held until its settle batch is written, and a batch written while the
        renewal was on its way makes the entry no longer pending: that is our own settle, not a loss.

        A stream whose renewal fails (its master down or hanging in a cluster, its group gone) does not stop the
        others': the failure is kept in ``renew_failure`` for the caller to report. Before, the first one ended the
        renewal, so on a cluster with one shard down the runs on the healthy shards lost their leases too, and were
        taken over and run again (paid LLM calls made twice)."""
        rt = self.runtime
        by_stream: dict[str, list[str]] = {}
        for stream, eid in rt.held():
            by_stream.setdefault(stream, []).append(eid)
        gone: list[Slot] = []
        self.renew_failure = None
        for stream, ids in by_stream.items():
            for start in range(0, len(ids), 1000):
                chunk = ids[start : start + 1000]
                try:
                    gone += [(stream, eid) for eid in await rt.on_slot(
                        stream, lambda: rt.scripts.renew(keys=[stream], args=[rt.group, rt.consumer, *chunk]))]
                except SlotSlow:  # its master hangs: renewed once it answers (the others' leases go on meanwhile)
                    break
                except REDIS_FAILED as exc:
                    self.renew_failure = self.renew_failure or exc
                    break
        working = rt.working() if gone else set()
        lost = [slot for slot in gone if slot in working]
        if news := [slot for slot in lost if slot not in self._reported]:
            log.warning("%s: %d entries still at work here were taken over by another consumer, which runs them again "
                        "(their lease ran out unrenewed: a Redis stall, or a process paused longer than the lease)",
                        rt.group, len(news))
        self._reported = set(lost)
        return lost

    async def sweep(self) -> int:
        """XAUTOCLAIM entries idle past the lease (their consumer died or hung); returns how many.

        Under a steady backlog the read loop refills each freed slot at once, so a sweep on its timer finds none
        free: stalled entries, older than any unread one, would wait for the backlog to drain. Those it finds
        without a free slot (XPENDING ... IDLE, one pipelined round for every such stream), or more than it could
        take, set ``runtime.stalled``: the read loop then sweeps into the next freed slots before it reads anything
        new."""
        async with self._taking_up:  # the timer's sweep and the read loop's never take the same slots twice
            try:
                if await self._holding_off():
                    return 0
                return await self._sweep()
            except REDIS_FAILED:
                self._away = True
                raise

    async def _holding_off(self) -> bool:
        """Whether sweeps wait, after an outage, for live consumers to renew first.

        Redis keeps an entry's idle time as a clock: over an outage longer than the lease (a restart loading its AOF,
        a paused VM), every entry of a live consumer looks stalled, and a sweep that came back before their owners'
        renewals would take healthy runs over (one more attempt counted, the owner's run stopped; a job allowed one
        ended failed). So once Redis answers again, no sweep for a renewal period and a backoff's longest sleep."""
        rt = self.runtime
        if self._away:
            try:
                await rt.on_slot(rt.streams[0], lambda: rt.redis.xlen(rt.streams[0]))  # raises while Redis is still away
            except SlotSlow:  # that stream's master hangs: not back yet
                return True
            self._away = False
            self._hold_until = time.monotonic() + rt.lease_s / 4 + BACKOFF_MAX_S + 1.0
            log.info("%s: Redis answers again; the reclaim sweep waits %.0fs for live consumers to renew their leases first",
                     rt.group, self._hold_until - time.monotonic())
        return time.monotonic() < self._hold_until

    async def _sweep(self) -> int:
        rt = self.runtime
        total = 0
        stalled = False
        unswept: list[str] = []
        min_idle_ms = int(rt.lease_s * 1000)
        for stream in rt.streams:
            free = min(rt.free_slots(), RECLAIM_BATCH)
            if free <= 0:
                unswept.append(stream)
                continue
            if not rt.accepting:
                break
            try:
                reply = await rt.on_slot(stream, functools.partial(rt.redis.xautoclaim, stream, rt.group, rt.consumer, min_idle_ms,
                                                                   self._cursors[stream], count=free),
                                         on_late=functools.partial(self._late_reclaimed, stream))
            except SlotSlow:  # its master hangs: swept once it answers
                continue
            entries = await self._reclaimed(stream, reply)
            total += len(entries)
            stalled = stalled or len(entries) >= free
        unswept = [stream for stream in unswept if not rt.slot_slow(stream)]
        if unswept and not stalled and rt.accepting:
            stalled = await self._any_stalled(unswept, min_idle_ms)
        rt.stalled = stalled
        return total

    async def _reclaimed(self, stream: str, reply: Any) -> list[Entry]:
        """Hand on what an XAUTOCLAIM took (also one answered late: streams.slow_slots)."""
        self._cursors[stream] = str(reply[0])
        entries = cast(list[Entry], reply[1])
        if entries:
            await self.runtime.deliver(stream, entries, reclaimed=True)
        return entries

    async def _late_reclaimed(self, stream: str, reply: Any) -> None:
        await self._reclaimed(stream, reply)

    async def _any_stalled(self, streams: list[str], min_idle_ms: int) -> bool:
        """Whether any of ``streams`` has an entry idle past the lease, in one pipelined round (a worker may read
        hundreds of partitions' lanes)."""
        rt = self.runtime
        async with rt.redis.pipeline(transaction=False) as pipe:
            for stream in streams:
                pipe.xpending_range(stream, rt.group, min="-", max="+", count=1, idle=min_idle_ms)
            replies = await pipe.execute(raise_on_error=False)
        return any(isinstance(reply, list) and reply for reply in replies)

    async def take_up_orphans(self) -> int:
        """Hold and hand on entries pending under this consumer, idle ``ORPHAN_IDLE_S``, that no slot holds and no
        handler let go on purpose; returns how many.

        Redis can serve a read whose reply is then lost: the cluster client drops every connection when it
        refreshes its slot map (a reshard's MOVED, a failover), and the read, retried, takes new entries. What
        the lost reply carried sits in this consumer's pending list, renewed by no one, and would wait out the
        whole lease. XCLAIM with the same minimum idle time leaves alone any entry another consumer just took.
        """
        async with self._taking_up:  # the read loop and the sweep never take up the same entry twice
            rt = self.runtime
            now = time.monotonic()
            for slot in [slot for slot, since in rt.unsettled.items() if now - since > rt.lease_s]:
                del rt.unsettled[slot]  # past the lease: the sweep's XAUTOCLAIM takes it, as before
            total = 0
            min_idle_ms = int(min(ORPHAN_IDLE_S, rt.lease_s / 2) * 1000)
            for stream in rt.streams:
                free = min(rt.free_slots(), RECLAIM_BATCH)
                if free <= 0 or not rt.accepting:
                    break
                try:
                    pending = await rt.on_slot(stream, functools.partial(rt.redis.xpending_range, stream, rt.group, min="-", max="+",
                                                                         count=free + rt.in_flight, consumername=rt.consumer, idle=min_idle_ms))
                except SlotSlow:
                    continue
                known = {*rt.held(), *rt.unsettled, *((stream, eid) for eid, _ in rt.leftover.get(stream, []))}
                ids = [eid for eid in (str(p["message_id"]) for p in pending) if (stream, eid) not in known][:free]
                if ids:
                    entries = await self._claim(stream, ids, min_idle_ms)
                    if entries:
                        log.warning("%s: took up %d entries of %s pending under this consumer but held by no slot (a read "
                                    "whose reply was lost)", rt.group, len(entries), stream)
                        total += len(entries)
                        await rt.deliver(stream, entries, reclaimed=False)
            return total

    def leftover_level(self) -> int:
        """The highest priority level with leftover: the read loop reads the levels above it first, so a high entry
        never waits behind low ones a read gave beyond the free slots (on a cluster the slots' blocking reads return
        side by side; on one Redis, entries that came between the non-blocking reads and the blocking one)."""
        return min(self.runtime.level_of[stream] for stream in self.runtime.leftover)

    async def take_up_leftover(self) -> int:
        """Hand on, as slots free and in order, what a read gave beyond the free slots; returns how many. Only those
        read under half a lease ago are claimed (XCLAIM, min-idle 0: no other consumer's sweep can have taken them);
        older ones are left to the sweep."""
        async with self._taking_up:
            rt = self.runtime
            total = 0
            for stream in [s for s in rt.streams if s in rt.leftover and not rt.slot_slow(s)]:  # highest priority first
                now = time.monotonic()
                items = [(eid, read_at) for eid, read_at in rt.leftover.pop(stream) if now - read_at < rt.lease_s / 2]
                free = max(0, rt.free_slots()) if rt.accepting else 0
                take, rest = items[:free], items[free:]
                if rest:
                    rt.leftover[stream] = rest
                if take:
                    entries = await self._claim(stream, [eid for eid, _ in take], 0)
                    total += len(entries)
                    await rt.deliver(stream, entries, reclaimed=False)
            return total

    async def let_go_of_leftover(self) -> None:
        """At drain: what a read gave beyond the free slots is marked idle past the lease, so another consumer's
        next sweep takes it instead of waiting out the lease."""
        rt = self.runtime
        fresh = {stream: [eid for eid, read_at in items if time.monotonic() - read_at < rt.lease_s / 2] for stream, items in rt.leftover.items()}
        await self._mark_idle(fresh, "entries read beyond the free slots")
        rt.leftover.clear()

    async def let_go(self, slots: list[Slot]) -> int:
        """At drain: entries whose work stopped unsettled are marked idle past the lease and their slots freed, so
        another consumer's next sweep takes them instead of waiting out the lease; returns how many."""
        by_stream: dict[str, list[str]] = {}
        for stream, eid in slots:
            by_stream.setdefault(stream, []).append(eid)
        let_go = await self._mark_idle(by_stream, "entries whose work the drain stopped")
        for slot in slots:
            self.runtime.release(*slot, settled=False)
        return let_go

    async def _mark_idle(self, by_stream: dict[str, list[str]], what: str) -> int:
        """Mark the entries this consumer still owns idle past the lease (let_go.lua: one another consumer took over
        is left alone); returns how many. Redis away at the drain: they wait out their lease instead."""
        rt = self.runtime
        marked = 0
        try:
            for stream, ids in by_stream.items():
                if ids:
                    marked += len(await rt.scripts.let_go(keys=[stream], args=[rt.group, rt.consumer, int(rt.lease_s * 1000) + 1, *ids]))
        except REDIS_FAILED as exc:
            log.warning("%s: could not let go of %d %s (%s); another consumer takes them after the lease",
                        rt.group, sum(map(len, by_stream.values())) - marked, what, exc)
        return marked

    async def forget_idle_consumers(self) -> list[str]:
        """Drop the group's consumers idle past ``forget_idle_s`` with nothing pending; returns their names."""
        rt = self.runtime
        removed: list[str] = []
        for stream in rt.streams:
            removed += await rt.scripts.forget(keys=[stream], args=[rt.group, int(rt.forget_idle_s * 1000)])
        if removed:
            log.info("%s: removed %d idle consumers with nothing pending: %s", rt.group, len(removed), ", ".join(sorted(set(removed))))
        return removed

    async def _claim(self, stream: str, ids: list[str], min_idle_ms: int) -> list[Entry]:
        rt = self.runtime
        return cast(list[Entry], await rt.redis.xclaim(stream, rt.group, rt.consumer, min_idle_ms, cast("list[Any]", ids)))
