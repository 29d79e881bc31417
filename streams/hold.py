"""Finished work held back briefly, so one write, and the one read its freed slots allow, serve several items.

A pool full of slow work frees its slots one at a time. Written at once, each finished item would cost a
Redis call of its own and, its slot freed, a read of its own: with job times spread out, calls per job, not
the scripts' work, then set a Redis instance's CPU per job. While ``hold`` says the slots freed so far would
not let the runtime's next read go yet (``GroupRuntime.refill``), items wait up to ``hold_s`` and are let go
together. Their entries stay pending meanwhile, so a crash only repeats what they did.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

T = TypeVar("T")

# A pool full of work reads again once a tenth of it is free, or after its refill wait (GroupRuntime.refill).
REFILL_FRACTION = 10


class Pool(Protocol):
    """What :func:`until_refill` reads of a :class:`~streams.runtime.GroupRuntime`."""

    refill: int

    @property
    def accepting(self) -> bool: ...

    def free_slots(self) -> int: ...


def until_refill(pool: Pool) -> Callable[[int], bool]:
    """A ``hold``: true while freeing the held items' slots would not let the pool's next read go yet."""
    return lambda held: pool.accepting and pool.free_slots() + held < pool.refill


class HeldBack(Generic[T]):
    """Passes items to ``let_go``; while ``hold(len(held))`` is true, after up to ``hold_s`` and together."""

    def __init__(self, let_go: Callable[[T], None], *, hold: Callable[[int], bool] | None = None, hold_s: float = 0.0) -> None:
        self._let_go_one = let_go
        self._hold = hold if hold_s > 0 else None
        self._hold_s = hold_s
        self._held: list[T] = []
        self._timer: asyncio.TimerHandle | None = None

    @property
    def held(self) -> int:
        return len(self._held)

    def submit(self, item: T) -> None:
        if self._hold is None:
            self._let_go_one(item)
            return
        self._held.append(item)
        if not self._hold(len(self._held)):
            self.let_go()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._hold_s, self.let_go)

    def let_go(self) -> None:
        """Pass on every held item now, in the order they came."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        held, self._held = self._held, []
        for item in held:
            self._let_go_one(item)
