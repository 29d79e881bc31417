"""The consumer-group runtime: read as much as there are free slots, keep leases, reclaim, drain.

One ``GroupRuntime`` serves one consumer in one group over streams in strict
priority order. It knows nothing of what an entry means: it holds a slot for
every entry it reads (so every pending entry belongs to work really under way,
and the lease heartbeat can vouch for all of them) and hands entries to an
:class:`EntryHandler`, which releases each slot once the entry is settled.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar, cast

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from streams.connection import BLOCK_MS
from streams.entries import Entry, EntryHandler, ReadReply, Slot
from streams.groups import ensure_group, is_nogroup
from streams.helper_loops import HelperLoops, survive
from streams.leases import Leases
from streams.outage import REDIS_DOWN, REDIS_FAILED, Backoff, within_pass
from streams.quiet import QuietStreams, by_slot, slot_of_for
from streams.scripts import Scripts
from streams.slow_slots import SlotSlow, slow_slots_of

log = logging.getLogger(__name__)

T = TypeVar("T")

__all__ = ["Entry", "EntryHandler", "GroupRuntime", "Slot", "is_nogroup"]

# One read takes at most this many entries, so a large pool fills in a few batches whose
# start, run and settle overlap instead of moving through the pipeline in lockstep.
READ_BATCH = 500
# A blocking read per slot on a cluster waits for its siblings: keep each short so a woken slot is read again soon.
CLUSTER_BLOCK_MS = 100


class GroupRuntime:
    """Reads one group's streams for one consumer, bounded by ``concurrency``."""

    def __init__(
        self,
        redis: Redis,
        *,
        streams: Sequence[str],
        group: str,
        consumer: str,
        concurrency: int,
        lease_s: float,
        tick_s: float = 0.25,
        block_ms: int = BLOCK_MS,
        forget_idle_s: float = 3600.0,
        refill: int = 1,
        refill_wait_s: float = 0.0,
        level_size: int = 1,
    ) -> None:
        """``level_size``: how many consecutive ``streams`` share one priority level (one stream per partition).
        A level's streams are read in turn, each read starting after the last one that gave entries, so a
        backlog in one partition never starves its siblings; a higher level still always goes first.

        ``refill``: while fewer slots than this are free (work fills the pool), the read waits up to
        ``refill_wait_s`` for that many, so one read takes several entries instead of one read per slot
        freed; with more free (an idle pool) it reads at once. The default 1 reads as soon as one is free."""
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        if level_size < 1 or len(streams) % level_size:
            raise ValueError(f"level_size {level_size} does not divide the {len(streams)} streams into priority levels")
        self.redis = redis
        self.streams = list(streams)
        self.group = group
        self.consumer = consumer
        self.concurrency = concurrency
        self.lease_s = lease_s
        self.tick_s = tick_s
        self.block_ms = block_ms
        self.forget_idle_s = forget_idle_s
        self.refill = max(1, min(refill, concurrency))
        self.refill_wait_s = refill_wait_s
        self.handler: EntryHandler | None = None
        self.scripts = Scripts(redis)
        self._slots: dict[Slot, asyncio.Task[None] | None] = {}
        self._freed = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._accepting = True
        self._levels = [self.streams[i : i + level_size] for i in range(0, len(self.streams), level_size)]
        self.level_of = {s: i // level_size for i, s in enumerate(self.streams)}  # each stream's priority level, 0 highest
        self._turns = [0] * len(self._levels)  # per level: the stream its next read tries first
        self._above = [[s for above in self._levels[:i] for s in above] for i in range(len(self._levels))]  # what a hit watches
        slot_of = slot_of_for(redis)  # on Redis Cluster: block on each slot's streams at once
        self._slot_of = slot_of
        self._blocking_groups = list(by_slot(self.streams, slot_of).values())
        # several slots (partitions on a cluster): reads skip a slot whose master hangs (streams.slow_slots)
        self.slow = slow_slots_of(redis) if len(self._blocking_groups) > 1 else None
        self.quiet = QuietStreams(redis, group, slot_of)
        self._reader: asyncio.Task[None] | None = None
        self.helpers = HelperLoops(self)  # renewal, reclaim, upkeep, cleanup: beside the read (streams.helper_loops)
        self.leftover: dict[str, list[tuple[str, float]]] = {}  # pending here, held by no slot: a read's beyond the free slots
        self.unsettled: dict[Slot, float] = {}  # pending here, held by no slot: let go unsettled
        self.stalled = False  # entries stalled elsewhere wait for slots: the read loop sweeps before it reads (Leases.sweep)
        # The last blocking read came back empty and nothing happened since: its '>' saw every stream empty for its whole
        # wait, so an idle loop blocks again without reading each stream first (tests/streams/test_idle_reads.py)
        self._blocked_empty = False
        self.leases = Leases(self)

    # -- slots ---------------------------------------------------------------

    def free_slots(self) -> int:
        return self.concurrency - len(self._slots)

    @property
    def in_flight(self) -> int:
        return len(self._slots)

    @property
    def accepting(self) -> bool:
        """False once :meth:`stop_accepting` was called (the drain)."""
        return self._accepting

    def _hold(self, stream: str, entry_id: str) -> bool:
        slot = (stream, entry_id)
        if slot in self._slots:
            return False
        self._slots[slot] = None
        self._idle.clear()
        return True

    def held(self) -> list[Slot]:
        return list(self._slots)

    def working(self) -> set[Slot]:
        """Held entries whose work has not ended: not yet started, or running (the rest wait for their settle)."""
        return {slot for slot, task in self._slots.items() if task is None or not task.done()}

    def attach(self, stream: str, entry_id: str, task: asyncio.Task[None]) -> None:
        self._slots[(stream, entry_id)] = task
        task.add_done_callback(functools.partial(self._ended, stream, entry_id))

    def _ended(self, stream: str, entry_id: str, task: asyncio.Task[None]) -> None:
        """A handler's work that raised (a fault of ours) frees its slot, the entry left pending for the sweep after
        the lease: its slot was held for good, unlogged, and enough such entries stopped all reading."""
        if task.cancelled() or (exc := task.exception()) is None or self._slots.get((stream, entry_id)) is not task:
            return
        log.error("%s: the work on entry %s of %s ended with %s; it stays pending, taken up again after the lease",
                  self.group, entry_id, stream, type(exc).__name__)
        self.release(stream, entry_id, settled=False)

    def abandon(self, slot: Slot) -> None:
        """Stop the work held for an entry another consumer now owns and free its slot: nothing is settled."""
        if (task := self._slots.get(slot)) is not None:
            task.cancel()
        self.release(*slot)

    def release(self, stream: str, entry_id: str, *, settled: bool = True) -> None:
        """Free an entry's slot; ``settled=False``: it stays pending on purpose, for the sweep after the lease."""
        if not settled:
            self.unsettled[(stream, entry_id)] = time.monotonic()
        if self._slots.pop((stream, entry_id), 0) != 0:
            self._freed.set()
            if not self._slots:
                self._idle.set()

    # -- loops ---------------------------------------------------------------

    async def ensure_groups(self) -> None:
        """The group on every stream read; a stream whose master hangs (streams.slow_slots) is left to the call running
        on in the background, or to the read that meets NOGROUP once its master answers."""
        for stream in self.streams:
            make = functools.partial(ensure_group, self.redis, stream, self.group)
            if self.slow is None:
                await make()
            else:
                with contextlib.suppress(SlotSlow):
                    await self.slow.unless_slow(self._slot_of(stream), make)

    async def run(self) -> None:
        """Read until :meth:`stop_accepting`; renewal, reclaim and upkeep run beside it."""
        assert self.handler is not None, "bind a handler first"
        backoff = Backoff(f"{self.group}/{self.consumer} start")
        while True:
            try:
                with backoff.trying():
                    await self.ensure_groups()
                break
            except REDIS_DOWN as exc:
                await backoff.failed(exc)
        backoff.ok()
        self.helpers.start()
        self._reader = asyncio.create_task(self._read_loop())
        try:
            await self._reader
        except asyncio.CancelledError:
            if self._accepting:
                raise

    async def stop_helpers(self) -> None:
        """Stop renewal, reclaim, upkeep and cleanup (:meth:`HelperLoops.stop`)."""
        await self.helpers.stop()

    def stop_accepting(self) -> None:
        """Claim nothing more; renewals go on so in-flight work keeps its leases."""
        self._accepting = False
        if self._reader is not None:
            self._reader.cancel()

    async def _read_loop(self) -> None:
        backoff = Backoff(f"{self.group}/{self.consumer} read")
        while self._accepting:
            blocked_empty, self._blocked_empty = self._blocked_empty, False  # kept only when nothing else comes first
            free = self.free_slots()
            if free <= 0:
                self._freed.clear()
                await self._freed.wait()
                continue
            if free < self.refill:
                blocked_empty = False  # slots freed meanwhile: read strictly, by priority
                await self._await_refill()
                if self.free_slots() <= 0:  # a reclaim (the sweep) took the freed slots meanwhile
                    continue
            try:
                with backoff.trying():
                    if self.stalled and await self.leases.sweep():  # older than anything unread
                        backoff.ok()
                        continue
                    if self.leftover and (await self._read_strict(self.leases.leftover_level()) or await self.leases.take_up_leftover()):
                        backoff.ok()
                        continue
                    if (blocked_empty or not await self._read_strict()) and self.free_slots() > 0:
                        self._blocked_empty = not await self._read_blocking()
                backoff.ok()
            except asyncio.CancelledError:
                raise
            except REDIS_DOWN as exc:
                await backoff.failed(exc)
            except ResponseError as exc:
                if is_nogroup(exc):
                    log.warning("%s: consumer group vanished (Redis restarted empty?); recreating it", self.group)
                    await self._recreate_groups(backoff)
                else:
                    log.exception("%s: Redis refused a read", self.group)
                    await backoff.failed(exc)
            except Exception:
                await survive(self, "the read loop")

    async def _await_refill(self) -> None:
        """Wait up to ``refill_wait_s`` until ``refill`` slots are free."""
        try:
            async with asyncio.timeout(self.refill_wait_s):
                while self.free_slots() < self.refill:
                    self._freed.clear()
                    await self._freed.wait()
        except TimeoutError:
            pass

    async def _recreate_groups(self, backoff: Backoff) -> None:
        try:
            await self.ensure_groups()
        except REDIS_FAILED as exc:  # a cluster's "no node answers" is no RedisError
            await backoff.failed(exc)

    async def _read_strict(self, above: int | None = None) -> bool:
        """One non-blocking read at a time, highest level first (only the levels ``above`` one, if given), sized by the slots
        free at that moment (a reclaim may take some between reads); within a level the streams take turns, and quiet
        ones (watched, streams.quiet) are skipped. Returns whether one gave entries (the next read starts from the top)."""
        for level, streams in enumerate(self._levels[:above]):
            first = self._turns[level]
            for step in range(len(streams)):
                free = self.free_slots()
                if free <= 0:
                    return False
                at = (first + step) % len(streams)
                stream = streams[at]
                if self.quiet.quiet(stream) or self.slot_slow(stream):
                    continue
                reply = await self._read(self._slot_of(stream), {stream: ">"}, count=min(free, READ_BATCH))
                if reply:
                    self._turns[level] = (at + 1) % len(streams)
                    self.quiet.watch(self._above[level])  # all read empty, or quiet
                    await self.deliver(stream, reply[0][1], reclaimed=False)
                    return True
        self.quiet.stop() if above is None else self.quiet.watch(self._above[above])  # all empty: the blocking read waits on each
        return False

    async def _read_blocking(self) -> bool:
        """All streams empty: wait for the first entry on any of them (COUNT 1 each); whether one came. On a cluster the
        slots' reads block side by side; each delivers what it got as it returns, and the next read waits for all (at most
        ``block_ms``). A slot whose master hangs is not waited on (nor read strictly: see :meth:`slot_slow`)."""
        if len(self._blocking_groups) == 1:
            return await self._read_blocking_group(self.streams)
        block_ms = min(self.block_ms, CLUSTER_BLOCK_MS)
        groups = [g for g in self._blocking_groups if self.slow is None or not self.slow.slow(self._slot_of(g[0]))]
        if not groups:  # every slot's master hangs: look again after a block's time
            await asyncio.sleep(block_ms / 1000)
            return False
        return any(await asyncio.gather(*(within_pass(self._read_blocking_group(group, block_ms)) for group in groups)))

    async def _read_blocking_group(self, streams: list[str], block_ms: int | None = None) -> bool:
        block = block_ms or self.block_ms
        reply = await self._read(self._slot_of(streams[0]), {s: ">" for s in streams}, count=1, block=block)
        await self._deliver_reply(reply)
        return any(entries for _, entries in reply or [])

    async def _read(self, slot: int, streams: dict[Any, Any], *, count: int, block: int | None = None) -> ReadReply:
        """One XREADGROUP; on a cluster, one whose master does not answer in time (a pause, a hang) is left to answer
        late, what it reads then handed on, and the read counts as empty meanwhile (streams.slow_slots)."""
        call = self.redis.xreadgroup(self.group, self.consumer, streams, count=count, block=block)
        if self.slow is None:
            return cast(ReadReply, await call)
        after_s = self.slow.after_s + (block or 0) / 1000
        try:
            return cast(ReadReply, await self.slow.call(slot, call, after_s=after_s, on_late=self._deliver_reply))
        except SlotSlow:
            return []

    def slot_slow(self, stream: str) -> bool:
        """On a cluster: whether ``stream``'s master hangs (streams.slow_slots); the loops skip it meanwhile."""
        return self.slow is not None and self.slow.slow(self._slot_of(stream))

    async def on_slot(self, stream: str, make_call: Callable[[], Awaitable[T]], on_late: Callable[[T], Awaitable[None]] | None = None) -> T:
        """``make_call()`` on ``stream``'s master; :class:`SlotSlow` when that master hangs: at once while it is known to
        (nothing sent), or once the call goes unanswered past its time (it runs on: streams.slow_slots)."""
        if self.slow is None:
            return await make_call()
        return await self.slow.unless_slow(self._slot_of(stream), make_call, on_late=on_late)

    async def _deliver_reply(self, reply: ReadReply | None) -> None:
        for stream, entries in sorted(reply or [], key=lambda r: self.streams.index(r[0])):
            await self.deliver(stream, entries, reclaimed=False)

    async def deliver(self, stream: str, entries: list[Entry], *, reclaimed: bool) -> None:
        fresh: list[Entry] = []
        now = time.monotonic()
        for eid, fields in entries:
            if eid is None:  # Redis 6.2's XCLAIM answers nil for a pending entry deleted meanwhile
                continue
            if self.free_slots() <= 0 or not self._accepting:  # blocking reads on several slots at once give more
                if (stream, eid) not in self._slots:
                    self.leftover.setdefault(stream, []).append((eid, now))
            elif self._hold(stream, eid):
                fresh.append((eid, fields))
        if not fresh:
            return
        handing = asyncio.ensure_future(self._hand_on(stream, fresh, reclaimed))
        try:
            if self.slow is None:
                await asyncio.shield(handing)
            else:  # a master that hung between the read and the start holds up only its own partition
                await self.slow.wait_or_leave(self._slot_of(stream), handing, f"{self.group}: starting what was read")
        except asyncio.CancelledError:
            # The drain cancels the read loop: entries held here are handed on all the same, so their work is
            # finished or handed back. Cancelled midway, a start that ran unseen left a job running under no slot's
            # work, pending until the lease, its attempt counted; a second cancellation (the process ending) stops it.
            await asyncio.gather(handing, return_exceptions=True)
            raise

    async def _hand_on(self, stream: str, fresh: list[Entry], reclaimed: bool) -> None:
        """Hand held entries to the handler, riding out Redis outages."""
        assert self.handler is not None
        backoff = Backoff(f"{self.group}/{self.consumer} start")
        while True:
            try:
                with backoff.trying():
                    await self.handler.on_entries(stream, fresh, reclaimed=reclaimed)
                break
            except REDIS_DOWN as exc:
                await backoff.failed(exc)
            except Exception:
                for eid, _ in fresh:  # not started: free their slots (not renewed, they are reclaimed after the lease)
                    if self._slots.get((stream, eid), 0) is None:
                        self.release(stream, eid, settled=False)
                raise
        backoff.ok()

    # -- drain ---------------------------------------------------------------

    async def drain(self, grace_s: float) -> tuple[int, int]:
        """Stop claiming, let held work finish within ``grace_s``, hand the rest back.

        Returns ``(finished, handed_back)``: the handler's count of what went back, not of what was left. Work that
        ended by itself is finished, also when its settle was still unwritten at the end of the grace (Redis stalled):
        the hand-back's flush writes it once Redis answers.
        """
        self.stop_accepting()
        before = len(self._slots)
        try:
            await asyncio.wait_for(self._idle.wait(), grace_s)
        except TimeoutError:
            pass
        tasks = dict(self._slots)
        leftover = list(tasks)
        for task in tasks.values():
            if task is not None:
                task.cancel()
        await asyncio.gather(*(t for t in tasks.values() if t is not None), return_exceptions=True)
        ended = sum(1 for t in tasks.values() if t is not None and not t.cancelled())  # its settle queued, not stopped
        handed_back = 0
        if leftover and self.handler is not None:
            backoff = Backoff(f"{self.group}/{self.consumer} hand back")
            for _ in range(20):
                try:
                    with backoff.trying():
                        handed_back = await self.handler.hand_back(leftover)
                    backoff.ok()
                    break
                except REDIS_DOWN as exc:
                    await backoff.failed(exc)
        await self.leases.let_go_of_leftover()
        await self.stop_helpers()
        return before - len(leftover) + ended, handed_back
