"""Hash slots whose master is slow to answer: a process serving several partitions stops waiting on them.

On Redis Cluster one worker reads, starts and settles every partition it serves through one client, in turn. A
master that hangs without dying (a paused VM, a stopped process, a long fork) answers nothing until the socket
timeout, and no failover comes while the pause is shorter than the node timeout (15 s by default): a loop that
waits on that master waits for every partition. So a call still unanswered after ``SLOW_CALL_S`` is left to end in
the background and its master is *slow*: the loops skip its slots until that call ends (and for ``COOL_DOWN_S`` more
when it failed), and the other masters' partitions go on. Nothing is cancelled, so no answer Redis gives is lost: a
late read hands on what it got, a late start runs what it started, and a late settle's ops are sent again, which
settle.lua answers as their first call.

A slot is slow with its master: a call on any slot a master serves marks them all (a master serves many partitions
when there are more partitions than shards), so the loops meet its pause once, not once per partition. One tracker
per cluster client (:func:`slow_slots_of`), shared by the reads and the settles of a process. A single Redis has
none: it has nowhere else to go.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

log = logging.getLogger(__name__)

T = TypeVar("T")

SLOW_CALL_S = 1.0  # far above a healthy call (milliseconds), far under the cluster client's 5 s socket timeout
COOL_DOWN_S = 1.0  # after a late call failed: its slot is tried again after this, not at once

_TRACKERS: weakref.WeakKeyDictionary[Any, SlowSlots] = weakref.WeakKeyDictionary()


class SlotSlow(Exception):
    """A call on ``slot`` did not answer within its time: it runs on in the background (:meth:`SlowSlots.call`)."""

    def __init__(self, slot: int, running: asyncio.Future[Any] | None = None) -> None:
        super().__init__(f"hash slot {slot}: its master has a call unanswered past its time")
        self.slot = slot
        self.running = running  # the call, still running


def slow_slots_of(redis: Any) -> SlowSlots | None:
    """The tracker of ``redis``'s slots: one per cluster client; None for a single Redis."""
    if not isinstance(redis, RedisCluster):
        return None
    tracker = _TRACKERS.get(redis)
    if tracker is None:
        client = weakref.ref(redis)  # the tracker must not keep its client alive (the map's key)

        def master_of(slot: int) -> str:
            return f"Redis master {client().nodes_manager.get_node_from_slot(slot).name}"  # type: ignore[union-attr]

        tracker = _TRACKERS[redis] = SlowSlots(master_of=master_of)
    return tracker


def slot_of(key: str) -> int:
    return key_slot(key.encode())


class SlowSlots:
    """Slots whose master has a call outstanding past its time, or is in its cool-down after such a call failed.

    A master's spell is logged once when it begins (its first call past its time) and once when it ends (a call on it
    answers), whatever the calls in between: a master paused for a minute makes two lines, not one per try."""

    def __init__(self, *, after_s: float = SLOW_CALL_S, cool_down_s: float = COOL_DOWN_S,
                 master_of: Callable[[int], str] | None = None) -> None:
        """``master_of``: the name of a slot's master as the client knows it now (the log's name for it, and what a
        slot's slowness is kept by); after a failover the slot has another, not slow."""
        self.after_s = after_s
        self.cool_down_s = cool_down_s
        self._master_of = master_of or (lambda slot: f"the master of hash slot {slot}")
        self._late: dict[str, set[asyncio.Future[Any]]] = {}  # master -> its calls still unanswered past their time
        self._cooling: dict[str, float] = {}  # master -> until (monotonic)
        self._spells: dict[str, float] = {}  # master -> when its spell began (monotonic)
        self._spell_slot: dict[str, int] = {}  # master -> a slot it served when its spell began (to see a failover)
        self._handing_on: set[asyncio.Task[None]] = set()
        self._left: set[asyncio.Future[Any]] = set()  # work left to end in the background (wait_or_leave)

    def _master(self, slot: int) -> str:
        try:
            return self._master_of(slot)
        except Exception:  # not covered now (a failover under way): the slot alone
            return f"the master of hash slot {slot}"

    def slow(self, slot: int) -> bool:
        if self._spells:
            self._end_moved_spells()
        master = self._master(slot)
        if master in self._late:
            return True
        until = self._cooling.get(master)
        if until is None:
            return False
        if time.monotonic() < until:
            return True
        del self._cooling[master]  # tried again: the next call on it waits its time once more
        return False

    async def call(self, slot: int, call: Awaitable[T], *, after_s: float | None = None,
                   on_late: Callable[[T], Awaitable[None]] | None = None, mark: bool = True) -> T:
        """``call``'s answer, or :class:`SlotSlow` when it has none after ``after_s`` (default ``SLOW_CALL_S``): the call
        then runs on and ``on_late`` gets its answer when it comes. A caller cancelled while waiting cancels the call.
        ``mark=False``: several calls in a row (a round of upkeep), which may take long on a healthy master: the
        master is not marked slow; the caller keeps :attr:`SlotSlow.running` and waits for it itself."""
        wait_s = self.after_s if after_s is None else after_s
        master = self._master(slot)
        task = asyncio.ensure_future(call)
        try:
            done, _ = await asyncio.wait({task}, timeout=wait_s)
        except asyncio.CancelledError:
            task.cancel()
            raise
        if done:
            result = task.result()
            self._answered(master)
            return result
        if not mark:
            raise SlotSlow(slot, task)
        if master not in self._spells:
            self._spells[master] = time.monotonic() - wait_s
            self._spell_slot[master] = slot
            log.warning("%s has not answered for %.1f s; its partitions wait, the others go on", master, wait_s)
        self._late.setdefault(master, set()).add(task)
        task.add_done_callback(lambda t: self._ended(master, t, on_late))
        raise SlotSlow(slot, task)

    async def unless_slow(self, slot: int, make_call: Callable[[], Awaitable[T]], **kwargs: Any) -> T:
        """:meth:`call` of ``make_call()``, or :class:`SlotSlow` at once (nothing sent) while the slot's master is slow."""
        if self.slow(slot):
            raise SlotSlow(slot)
        return await self.call(slot, make_call(), **kwargs)

    async def wait_or_leave(self, slot: int, future: asyncio.Future[Any], what: str) -> None:
        """Wait for ``future`` (shielded: a cancelled caller leaves it running) up to the slow-call time; past it, leave it
        to end in the background, the slot slow until it does, and a failure of it logged as ``what``."""
        try:
            await self.call(slot, asyncio.shield(future))
        except SlotSlow:
            self._left.add(future)
            future.add_done_callback(lambda f: self._left_ended(f, what))

    def _left_ended(self, future: asyncio.Future[Any], what: str) -> None:
        self._left.discard(future)
        if not future.cancelled() and (exc := future.exception()) is not None:
            log.error("%s: failed once its master answered", what, exc_info=exc)

    def _answered(self, master: str) -> None:
        if master not in self._late and (began := self._spells.pop(master, None)) is not None:
            self._spell_slot.pop(master, None)
            log.warning("%s answers again, after %.1f s", master, time.monotonic() - began)

    def _end_moved_spells(self) -> None:
        """End the spell of a master whose slots another now serves (its replica promoted: a failover), its calls over:
        nothing goes to it any more, so it would never answer again here."""
        for master, began in list(self._spells.items()):
            if master in self._late:
                continue
            try:
                now_serving = self._master_of(self._spell_slot[master])
            except Exception:  # not covered now: the failover is under way
                continue
            if now_serving != master:
                del self._spells[master], self._spell_slot[master]
                self._cooling.pop(master, None)
                log.warning("%s: its partitions are served by %s now, after %.1f s (a failover, or the cluster came back on "
                            "new addresses)", master, now_serving, time.monotonic() - began)

    def _ended(self, master: str, task: asyncio.Future[Any], on_late: Callable[[Any], Awaitable[None]] | None) -> None:
        late = self._late.get(master, set())
        late.discard(task)
        if not late:
            self._late.pop(master, None)
        if task.cancelled():
            return
        if (exc := task.exception()) is not None:  # timed out, most likely: its calls wait a cool-down, then try again
            self._cooling[master] = time.monotonic() + self.cool_down_s
            log.debug("%s: a late call failed (%s); tried again in %g s", master, type(exc).__name__, self.cool_down_s)
            return
        self._answered(master)
        if on_late is not None:
            handing = asyncio.ensure_future(self._hand_on(master, on_late(task.result())))
            self._handing_on.add(handing)
            handing.add_done_callback(self._handing_on.discard)

    @staticmethod
    async def _hand_on(master: str, handing: Awaitable[None]) -> None:
        try:
            await handing
        except asyncio.CancelledError:
            raise
        except Exception:  # what was read stays pending here and is reclaimed after the lease: nothing is lost
            log.exception("%s: handing on its late answer failed", master)


class SlowRounds:
    """Rounds of several calls in a row on one partition (an upkeep: promotions, trims), one partition at a time.

    A round running past the slow-call time is left to end in the background and its partition skipped until it has,
    without marking its master slow: a long round on a healthy master (a large retry backlog promoted) must not stop
    that master's reads. A round left running that failed is not raised: it ran past its time, so its master hung and
    its calls timed out; the next round, on time, tells the caller's backoff."""

    def __init__(self, slow: SlowSlots | None, what: str) -> None:
        self._slow = slow
        self._what = what
        self._left: dict[int, asyncio.Future[Any]] = {}  # partition index -> its round, left running

    async def run(self, i: int, slot: int, make_round: Callable[[], Awaitable[Any]]) -> None:
        """Partition ``i``'s round, in ``slot``: awaited (a single Redis, or its time not past), skipped (its last one
        still running, or its master slow) or left running."""
        if self._slow is None:
            await make_round()
            return
        if not self._round_over(i):
            return
        try:
            await self._slow.unless_slow(slot, make_round, mark=False)
        except SlotSlow as slow:
            if slow.running is not None:
                self._left[i] = slow.running

    def _round_over(self, i: int) -> bool:
        left = self._left.get(i)
        if left is None:
            return True
        if not left.done():
            return False
        del self._left[i]
        if not left.cancelled() and (exc := left.exception()) is not None:
            log.debug("%s of partition %d: a round left running failed (%s)", self._what, i, type(exc).__name__)
        return True
