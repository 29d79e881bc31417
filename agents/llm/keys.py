"""The API-key pool: rotation on 429, cool-downs, and a per-key concurrency cap.

A key that answered 429 cools down until its Retry-After (or a backoff) has
passed and is not handed out before then; callers move to the next key. When
every key is cooling, ``acquire`` sleeps until the earliest one is back (one
timer, no polling) unless that is past the caller's deadline; it queues for a
slot of a key at its cap until that deadline, no longer. Keys appear
only as redacted labels (``key#1``); ``ApiKey`` never prints its secret.
"""

from __future__ import annotations

import asyncio
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
            else:  # every ready key is at its cap: queue for the next one's, until the deadline
                key = ready[0]
                if now >= deadline:
                    return None
                try:
                    async with asyncio.timeout(deadline - now):
                        await key.slots.acquire()
                except TimeoutError:
                    return None
            if key.cool_until <= self._clock():
                self._next = (self.keys.index(key) + 1) % len(self.keys)
                return key
            key.slots.release()  # it started cooling while we queued for a slot

    def release(self, key: ApiKey) -> None:
        key.slots.release()

    def earliest_ready_in(self) -> float:
        """Seconds until some key is out of cool-down (0 when one is ready)."""
        return max(0.0, min(k.cool_until for k in self.keys) - self._clock())
