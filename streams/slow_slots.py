"""Hash slots whose master is slow to answer: a process serving several partitions stops waiting on them.

On Redis Cluster one worker reads, starts and settles every partition it serves through one client, in turn. A
master that hangs without dying (a paused VM, a stopped process, a long fork) answers nothing until the socket
timeout, and no failover comes while the pause is shorter than the node timeout (15 s by default): a loop that
waits on that master waits for every partition. So a call still unanswered after ``SLOW_CALL_S`` is left to end in
the background and its slot is *slow*: the loops skip it until that call ends (and for ``COOL_DOWN_S`` more when
it failed), and the other masters' partitions go on. Nothing is cancelled, so no answer Redis gives is lost: a late
read hands on what it got, and a late settle's ops are sent again, which settle.lua answers as their first call.

One tracker per cluster client (:func:`slow_slots_of`), shared by the reads and the settles of a process: a slot found
slow by one is skipped by the other. A single Redis has none: it has nowhere else to go.
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

    def __init__(self, slot: int) -> None:
        super().__init__(f"hash slot {slot}: its master has not answered a call for {SLOW_CALL_S:g} s")
        self.slot = slot


def slow_slots_of(redis: Any) -> SlowSlots | None:
    """The tracker of ``redis``'s slots: one per cluster client; None for a single Redis."""
    if not isinstance(redis, RedisCluster):
        return None
    tracker = _TRACKERS.get(redis)
    if tracker is None:
        tracker = _TRACKERS[redis] = SlowSlots()
    return tracker


def slot_of(key: str) -> int:
    return key_slot(key.encode())


class SlowSlots:
    """Slots with a call outstanding past its time, or in their cool-down after such a call failed.

    A slot's spell is logged once when it begins (its first call past its time) and once when it ends (a call on it
    answers), whatever the calls in between: a master paused for a minute makes two lines, not one per try."""

    def __init__(self, *, after_s: float = SLOW_CALL_S, cool_down_s: float = COOL_DOWN_S) -> None:
        self.after_s = after_s
        self.cool_down_s = cool_down_s
        self._late: dict[int, set[asyncio.Future[Any]]] = {}  # slot -> its calls still unanswered past their time
        self._cooling: dict[int, float] = {}  # slot -> until (monotonic)
        self._spells: dict[int, float] = {}  # slot -> when its spell began (monotonic)
        self._handing_on: set[asyncio.Task[None]] = set()

    def slow(self, slot: int) -> bool:
        if slot in self._late:
            return True
        until = self._cooling.get(slot)
        if until is None:
            return False
        if time.monotonic() < until:
            return True
        del self._cooling[slot]  # tried again: the next call on it waits its time once more
        return False

    async def call(self, slot: int, call: Awaitable[T], *, after_s: float | None = None,
                   on_late: Callable[[T], Awaitable[None]] | None = None) -> T:
        """``call``'s answer, or :class:`SlotSlow` when it has none after ``after_s`` (default ``SLOW_CALL_S``): the call
        then runs on and ``on_late`` gets its answer when it comes. A caller cancelled while waiting cancels the call."""
        wait_s = self.after_s if after_s is None else after_s
        task = asyncio.ensure_future(call)
        try:
            done, _ = await asyncio.wait({task}, timeout=wait_s)
        except asyncio.CancelledError:
            task.cancel()
            raise
        if done:
            result = task.result()
            self._answered(slot)
            return result
        if slot not in self._spells:
            self._spells[slot] = time.monotonic() - wait_s
            log.warning("hash slot %d: its master has not answered for %.1f s; its partition waits, the others go on", slot, wait_s)
        self._late.setdefault(slot, set()).add(task)
        task.add_done_callback(lambda t: self._ended(slot, t, on_late))
        raise SlotSlow(slot)

    def _answered(self, slot: int) -> None:
        if slot not in self._late and (began := self._spells.pop(slot, None)) is not None:
            log.warning("hash slot %d: its master answers again, after %.1f s", slot, time.monotonic() - began)

    def _ended(self, slot: int, task: asyncio.Future[Any], on_late: Callable[[Any], Awaitable[None]] | None) -> None:
        late = self._late.get(slot, set())
        late.discard(task)
        if not late:
            self._late.pop(slot, None)
        if task.cancelled():
            return
        if (exc := task.exception()) is not None:  # timed out, most likely: the slot's calls wait a cool-down, then try again
            self._cooling[slot] = time.monotonic() + self.cool_down_s
            log.debug("hash slot %d: a late call failed (%s); tried again in %g s", slot, type(exc).__name__, self.cool_down_s)
            return
        self._answered(slot)
        if on_late is not None:
            handing = asyncio.ensure_future(self._hand_on(slot, on_late(task.result())))
            self._handing_on.add(handing)
            handing.add_done_callback(self._handing_on.discard)

    @staticmethod
    async def _hand_on(slot: int, handing: Awaitable[None]) -> None:
        try:
            await handing
        except asyncio.CancelledError:
            raise
        except Exception:  # what was read stays pending here and is reclaimed after the lease: nothing is lost
            log.exception("hash slot %d: handing on a late answer failed", slot)
