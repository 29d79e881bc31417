"""Leases on pending entries: renewing those this consumer holds, and taking over those no live slot holds (a
stalled consumer's, with XAUTOCLAIM after the lease; this consumer's own whose read reply was lost, with XCLAIM
after a short idle time)."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, cast

from streams.entries import Entry, Slot

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

    async def renew(self) -> list[Slot]:
        """Reset the idle time of every held entry (XCLAIM ... JUSTID); returns the held ones no longer ours."""
        rt = self.runtime
        by_stream: dict[str, list[str]] = {}
        for stream, eid in rt.held():
            by_stream.setdefault(stream, []).append(eid)
        lost: list[Slot] = []
        for stream, ids in by_stream.items():
            for start in range(0, len(ids), 1000):
                chunk = ids[start : start + 1000]
                gone = await rt.scripts.renew(keys=[stream], args=[rt.group, rt.consumer, *chunk])
                lost += [(stream, eid) for eid in gone]
        if lost:
            log.info("%s: %d held entries are no longer ours (reclaimed or settled elsewhere)", rt.group, len(lost))
        return lost

    async def sweep(self) -> int:
        """XAUTOCLAIM entries idle past the lease (their consumer died or hung); returns how many."""
        rt = self.runtime
        total = 0
        min_idle_ms = int(rt.lease_s * 1000)
        for stream in rt.streams:
            free = min(rt.free_slots(), RECLAIM_BATCH)
            if free <= 0 or not rt.accepting:
                break
            reply = await rt.redis.xautoclaim(stream, rt.group, rt.consumer, min_idle_ms, self._cursors[stream], count=free)
            cursor, entries = str(reply[0]), cast(list[Entry], reply[1])
            self._cursors[stream] = cursor
            if entries:
                total += len(entries)
                await rt.deliver(stream, entries, reclaimed=True)
        return total

    async def take_up_orphans(self, *, fresh_only: bool = False) -> int:
        """Hold and hand on entries pending under this consumer that no slot holds; returns how many.

        ``fresh_only``: those a read just gave beyond the free slots, at once (idle under half the lease, so no
        other consumer's sweep can be taking them); otherwise those idle ``ORPHAN_IDLE_S`` or more (see below).

        Redis can serve a read whose reply is then lost: the cluster client drops every connection when it
        refreshes its slot map (a reshard's MOVED, a failover), and the read, retried, takes new entries. What
        the lost reply carried sits in this consumer's pending list, renewed by no one, and would wait out the
        whole lease. XCLAIM with the same minimum idle time leaves alone any entry another consumer just took.
        """
        async with self._taking_up:  # the read loop and the sweep never take up the same entry twice
            return await self._take_up_orphans(fresh_only)

    async def _take_up_orphans(self, fresh_only: bool) -> int:
        rt = self.runtime
        total = 0
        min_idle_ms = 0 if fresh_only else int(min(ORPHAN_IDLE_S, rt.lease_s / 2) * 1000)
        fresh_ms = rt.lease_s * 1000 / 2
        for stream in rt.streams:
            free = min(rt.free_slots(), RECLAIM_BATCH)
            if free <= 0 or not rt.accepting:
                break
            pending = await rt.redis.xpending_range(stream, rt.group, min="-", max="+", count=free + rt.in_flight,
                                                    consumername=rt.consumer, idle=min_idle_ms or None)
            held = set(rt.held())
            ids = [str(p["message_id"]) for p in pending
                   if (stream, str(p["message_id"])) not in held and (not fresh_only or int(p["time_since_delivered"]) < fresh_ms)][:free]
            if not ids:
                continue
            entries = cast(list[Entry], await rt.redis.xclaim(stream, rt.group, rt.consumer, min_idle_ms, cast("list[Any]", ids)))
            if entries and not fresh_only:
                log.warning("%s: took up %d entries of %s pending under this consumer but held by no slot (a read "
                            "whose reply was lost)", rt.group, len(entries), stream)
            if entries:
                total += len(entries)
                await rt.deliver(stream, entries, reclaimed=False)
        return total
