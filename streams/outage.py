"""Riding out Redis outages: what counts as one, and the backoff every loop waits with meanwhile.

A process never gives up on Redis: its loops wait with :class:`Backoff` (one log line when the outage
starts, one when it ends) and try again, so an outage or a cluster failover delays work and loses none.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from typing import Any, TypeVar

import redis.exceptions
from redis.exceptions import ClusterError, OutOfMemoryError, ReadOnlyError, ResponseError, SlotNotCoveredError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

log = logging.getLogger(__name__)

T = TypeVar("T")

BACKOFF_FIRST_S = 0.1
BACKOFF_MAX_S = 5.0
# An outage that starts this soon after the last one logged is a flap of the same trouble: a loop whose calls
# alternate between writes Redis refuses for now and reads it serves (upkeep under OOM or NOREPLICAS) would
# otherwise log two lines a second. Such a flap is logged (at WARNING) only once it lasts FLAP_LOGGED_AFTER_S;
# the next line logged says how many went unlogged.
FLAP_WINDOW_S = 60.0
FLAP_LOGGED_AFTER_S = 2.0


class Backoff:
    """Capped exponential backoff for Redis outages, with one log line when one starts and one when it ends.

    An outage starts when the first call of it was sent: a loop's calls inside :meth:`trying` tell it at their first
    timeout, while redis-py still sends them again (streams.connection.NoticingRetry). Before, a call that timed out
    reached the loop only after three tries (45 s at the 15 s socket timeout): no line until then, none at all for
    a shorter hang, and "back after" timed from that line (a 50 s hang read "back after 4.7s")."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.delay_s = 0.0
        self.since: float | None = None
        self._pass_at: float | None = None  # when the last pass of calls (trying) began
        self._logged_at = -FLAP_WINDOW_S
        self._told = False  # this outage's start was logged: so will its end be
        self._unlogged = 0  # short outages since the last logged one

    @contextlib.contextmanager
    def trying(self) -> Iterator[None]:
        """Around one pass of the loop's calls to Redis: a call in it that times out tells this backoff at once, while
        redis-py sends it again (only the running task's calls, not those of tasks the pass starts)."""
        self._pass_at = time.monotonic()
        token = _TRYING.set((asyncio.current_task(), self))
        try:
            yield
        finally:
            _TRYING.reset(token)

    def _begun(self, exc: BaseException, at: float) -> None:
        """The outage began at ``at`` unless it had begun already; logged once (flaps: see FLAP_WINDOW_S)."""
        now = time.monotonic()
        if self.since is None:
            self.since = at
            self._told = False
        if not self._told and (now - self._logged_at >= FLAP_WINDOW_S or now - self.since >= FLAP_LOGGED_AFTER_S):
            self._told, self._logged_at = True, now
            unlogged, self._unlogged = self._unlogged, 0
            log.warning("%s: Redis unavailable (%s: %s); retrying with backoff%s", self.what, type(exc).__name__, exc,
                        f" ({unlogged} shorter outages since the last such line)" if unlogged else "")

    async def failed(self, exc: BaseException) -> None:
        # A call that timed out was sent a socket timeout ago at least, in this pass: when no retry told of it (the
        # cluster client's pipelines retry in their own loop), the pass's start is nearer the outage's than now is.
        at = self._pass_at if isinstance(exc, RedisTimeoutError) and self._pass_at is not None else time.monotonic()
        self._begun(exc, at)
        self._pass_at = None
        self.delay_s = min(BACKOFF_MAX_S, max(BACKOFF_FIRST_S, self.delay_s * 2))
        await asyncio.sleep(self.delay_s)

    def ok(self) -> None:
        if self.since is not None:
            if self._told:
                log.warning("%s: Redis is back after %.1fs", self.what, time.monotonic() - self.since)
            else:
                self._unlogged += 1
        self.since = None
        self.delay_s = 0.0


_TRYING: ContextVar[tuple[asyncio.Task[Any] | None, Backoff] | None] = ContextVar("streams_outage_trying", default=None)


def call_failing(exc: BaseException, sent_at: float) -> None:
    """A call sent at ``sent_at`` failed, and redis-py may send it again (streams.connection): if it timed out, Redis
    has not answered for a whole socket timeout, so tell the backoff of the running task's pass, if it is in one
    (:meth:`Backoff.trying`). A connection lost and at once made again (Redis closed an idle one) is no outage; one
    refused fails the call within a second, after redis-py's quick tries, and the loop logs it then."""
    trying = _TRYING.get()
    if trying is not None and trying[0] is asyncio.current_task() and isinstance(exc, RedisTimeoutError):
        trying[1]._begun(exc, sent_at)


def within_pass(call: Awaitable[T]) -> Awaitable[T]:
    """``call``, to be run on a task of its own (``asyncio.gather``) as part of the running task's pass
    (:meth:`Backoff.trying`): a call in it that times out tells the pass's backoff, as the pass's own calls do. (A
    worker on a cluster blocks on every slot's lanes side by side; tasks the call starts in turn, jobs, stay apart.)"""
    trying = _TRYING.get()
    if trying is None or trying[0] is not asyncio.current_task():
        return call
    backoff = trying[1]

    async def run() -> T:
        _TRYING.set((asyncio.current_task(), backoff))  # in this task's own copy of the context only
        return await call

    return run()


class WritesHeldBack(ResponseError):
    """Redis takes no writes for now, and will again: ``NOREPLICAS`` (fewer replicas than min-replicas-to-write),
    ``MISCONF`` (its snapshot failed, a full disk, and stop-writes-on-bgsave-error is on), ``BUSY`` (a script ran
    past its time limit). redis-py raises a plain ResponseError for these; the streams clients raise this
    (streams.connection), so loops wait them out like an outage, instead of logging a traceback per pass and
    dropping a settle batch whose jobs would then run again after their lease."""


HELD_BACK_CODES = ("NOREPLICAS", "MISCONF", "BUSY")


# Redis (or the shard of a key) cannot answer now but will: back off and try again, losing nothing.
# On a cluster a failover answers CLUSTERDOWN / TRYAGAIN / READONLY for a few seconds; those are outages too,
# not refusals of the call (a refused settle batch would wait for its entries' lease to run out). A Redis at its
# maxmemory (noeviction) refuses writes with OOM until memory is freed or raised: an outage of writes, so finished
# work waits in memory and is written then, rather than run again after its lease (a script refused by OOM wrote nothing).
# The cluster client's own "no node of the cluster answers" (every node down: a restart of the whole cluster) and "no
# master for this slot" are outages too: before, each pass of a loop logged them as an unexpected error with a traceback.
# (redis-py before 8.2 raises the first as a plain RedisClusterException, which stays an unexpected error there.)
# Redis taking no writes for now (WritesHeldBack) is one too.
CLUSTER_UNREACHABLE: tuple[type[Exception], ...] = tuple(
    getattr(redis.exceptions, name) for name in ("RedisClusterUnreachableError",) if hasattr(redis.exceptions, name))
REDIS_DOWN: tuple[type[BaseException], ...] = (
    RedisConnectionError, RedisTimeoutError, OSError, ClusterError, TryAgainError, ReadOnlyError, OutOfMemoryError,
    WritesHeldBack, SlotNotCoveredError, *CLUSTER_UNREACHABLE,
)

# Any failure of a call to Redis: a refusal (RedisError) or an outage (a cluster's "no node answers" is no RedisError).
REDIS_FAILED: tuple[type[BaseException], ...] = (redis.exceptions.RedisError, *REDIS_DOWN)


async def until_redis_answers(what: str, call: Callable[[], Awaitable[T]], *, unless: tuple[type[BaseException], ...] = ()) -> T:
    """``await call()`` again and again, with :class:`Backoff`, until Redis answers it (a write that must land).

    ``unless``: outages by type that waiting cannot cure (a wrong password is a ConnectionError), raised at once."""
    backoff = Backoff(what)
    while True:
        try:
            with backoff.trying():
                answer = await call()
        except REDIS_DOWN as exc:
            if isinstance(exc, unless):
                raise
            await backoff.failed(exc)
        else:
            backoff.ok()
            return answer


class OncePerOutage(logging.Filter):
    """Lets one "Topology refresh failed" record of redis-py's cluster client through per ``every_s``.

    While no node of a cluster answers, redis-py logs that ERROR on every retry of every loop, about once a
    second; the loops' :class:`Backoff` already says the outage started and when it ended, once each.
    """

    def __init__(self, every_s: float = 60.0) -> None:
        super().__init__()
        self.every_s = every_s
        self.last: float | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("Topology refresh failed"):
            return True
        now = time.monotonic()
        if self.last is not None and now - self.last < self.every_s:
            return False
        self.last = now
        return True


def quiet_cluster_refresh_errors() -> None:
    """Install :class:`OncePerOutage` on redis-py's cluster loggers (asyncio and sync: the /metrics gauges)."""
    for name in ("redis.asyncio.cluster", "redis.cluster"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, OncePerOutage) for f in logger.filters):
            logger.addFilter(OncePerOutage())
