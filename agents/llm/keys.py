"""The API-key pool: rotation on 429, cool-downs, and a per-key concurrency cap.

A key that answered 429 cools down until its Retry-After (or a backoff) has
passed and is not handed out before then; callers move to the next key. When
every key is cooling, ``acquire`` sleeps until the earliest one is back (one
timer, no polling) unless that is past the caller's deadline. When every ready
key is at its cap, it queues for a slot on all of them at once and takes the
first that frees (a slow call on one key must not hold up the others' waiters),
until that deadline, no longer. Keys appear only as redacted labels
(``key#1``); ``ApiKey`` never prints its secret.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


@dataclass(eq=False)
class ApiKey:
    """One key: its secret (never in repr), label, cool-down end and in-flight cap."""

    label: str
    secret: str | None = field(repr=False)
    slots: asyncio.Semaphore = field(repr=False)
    cool_until: float = 0.0


class KeyPool:
    """Hands out the usable keys each in turn, skipping cooling ones; ``acquire`` also takes a concurrency slot."""

    def __init__(self, secrets: Sequence[str | None], *, max_concurrency: int, clock: Callable[[], float] = time.monotonic) -> None:
        secrets = list(secrets) or [None]
        self.keys = [
            ApiKey("anonymous" if secret is None else f"key#{i}", secret, asyncio.Semaphore(max_concurrency))
            for i, secret in enumerate(secrets, start=1)
        ]
        self._clock = clock
        self._next = 0

    def cool_down(self, key: ApiKey, seconds: float) -> None:
        """Keep ``key`` out of rotation for ``seconds`` (never shortens a longer cool-down)."""
        key.cool_until = max(key.cool_until, self._clock() + max(0.0, seconds))

    def _ready(self, now: float) -> list[ApiKey]:
        """The usable keys, starting from the one after the last handed out (skipping a cooling key must not
        hand its turn to its neighbour: that key would get a double share)."""
        n = len(self.keys)
        ordered = [self.keys[(self._next + i) % n] for i in range(n)]
        return [k for k in ordered if k.cool_until <= now]

    async def acquire(self, deadline: float) -> ApiKey | None:
        """A ready key with a slot taken (release it with ``release``), or None if none is ready by ``deadline``:
        every key cooling past it, or the slots in use until then (a job without a timeout would wait on)."""
        while True:
            now = self._clock()
            ready = self._ready(now)
            if not ready:
                earliest = min(k.cool_until for k in self.keys)
                if earliest > deadline:
                    return None
                await asyncio.sleep(earliest - now)
                continue
            free = next((k for k in ready if not k.slots.locked()), None)
            if free is not None:
                key = free
                await key.slots.acquire()  # a free slot: taken at once
            else:  # every ready key is at its cap: queue for the first slot any of them frees, until the deadline
                if now >= deadline:
                    return None
                taken = await _first_slot(ready, deadline - now)
                if taken is None:
                    return None
                key = taken
            if key.cool_until <= self._clock():
                self._next = (self.keys.index(key) + 1) % len(self.keys)
                return key
            key.slots.release()  # it started cooling while we queued for a slot

    def release(self, key: ApiKey) -> None:
        key.slots.release()

    def earliest_ready_in(self) -> float:
        """Seconds until some key is out of cool-down (0 when one is ready)."""
        return max(0.0, min(k.cool_until for k in self.keys) - self._clock())


async def _first_slot(keys: list[ApiKey], timeout_s: float) -> ApiKey | None:
    """A slot of whichever of ``keys`` frees one first (the earliest in ``keys`` on a tie), or None after ``timeout_s``.
    The other queued waits are cancelled; one granted in the meantime is given back."""
    waits = {asyncio.ensure_future(key.slots.acquire()): key for key in keys}
    kept: ApiKey | None = None
    try:
        await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        kept = next((key for wait, key in waits.items() if wait.done() and not wait.cancelled()), None)
    finally:  # on a timeout or our own cancellation too: no slot may stay taken by nobody
        for wait, key in waits.items():
            if key is not kept:
                wait.cancel()
                wait.add_done_callback(functools.partial(_give_back, key=key))
    return kept


def _give_back(wait: asyncio.Future[bool], key: ApiKey) -> None:
    if not wait.cancelled():  # granted before the cancel reached it (Semaphore.acquire undoes a grant it is cancelled in)
        key.slots.release()
