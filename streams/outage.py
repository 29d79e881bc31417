"""Riding out Redis outages: what counts as one, and the backoff every loop waits with meanwhile.

A process never gives up on Redis: its loops wait with :class:`Backoff` (one log line when the outage
starts, one when it ends) and try again, so an outage or a cluster failover delays work and loses none.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from redis.exceptions import ClusterError, OutOfMemoryError, ReadOnlyError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

log = logging.getLogger(__name__)

T = TypeVar("T")

BACKOFF_FIRST_S = 0.1
BACKOFF_MAX_S = 5.0


class Backoff:
    """Capped exponential backoff for Redis outages, with one log line per outage."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.delay_s = 0.0
        self.since: float | None = None

    async def failed(self, exc: BaseException) -> None:
        if self.since is None:
            self.since = time.monotonic()
            log.warning("%s: Redis unavailable (%s: %s); retrying with backoff", self.what, type(exc).__name__, exc)
        self.delay_s = min(BACKOFF_MAX_S, max(BACKOFF_FIRST_S, self.delay_s * 2))
        await asyncio.sleep(self.delay_s)

    def ok(self) -> None:
        if self.since is not None:
            log.warning("%s: Redis is back after %.1fs", self.what, time.monotonic() - self.since)
        self.since = None
        self.delay_s = 0.0


# Redis (or the shard of a key) cannot answer now but will: back off and try again, losing nothing.
# On a cluster a failover answers CLUSTERDOWN / TRYAGAIN / READONLY for a few seconds; those are outages too,
# not refusals of the call (a refused settle batch would wait for its entries' lease to run out). A Redis at its
# maxmemory (noeviction) refuses writes with OOM until memory is freed or raised: an outage of writes, so finished
# work waits in memory and is written then, rather than run again after its lease (a script refused by OOM wrote nothing).
REDIS_DOWN = (RedisConnectionError, RedisTimeoutError, OSError, ClusterError, TryAgainError, ReadOnlyError, OutOfMemoryError)


async def until_redis_answers(what: str, call: Callable[[], Awaitable[T]], *, unless: tuple[type[BaseException], ...] = ()) -> T:
    """``await call()`` again and again, with :class:`Backoff`, until Redis answers it (a write that must land).

    ``unless``: outages by type that waiting cannot cure (a wrong password is a ConnectionError), raised at once."""
    backoff = Backoff(what)
    while True:
        try:
            answer = await call()
        except REDIS_DOWN as exc:
            if isinstance(exc, unless):
                raise
            await backoff.failed(exc)
        else:
            backoff.ok()
            return answer
