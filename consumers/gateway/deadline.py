"""A bounded answer: a job request the gateway cannot answer within ``seconds`` of its body's last byte
is answered ``503 redis_unavailable`` with ``Retry-After``.

Redis that stops answering (a paused host, a long fork, a stalled script) is otherwise waited out by the
client: 15 s per try, sent again twice, so a caller would hear nothing for ~45 s, and every request meanwhile
held a connection and memory here. The clock starts again at each body chunk, so a slow upload is the client's
time, not the budget; it stops once the answer has started. Bounded: ``/jobs`` and ``/tasks`` calls, and the
admin routes' reads (``GET /queue/stats``, ``/dead``, ``/webhooks/dead``: cutting a read off changes nothing).
Not bounded: event streams (``/jobs/{job_id}/events``, which answer for minutes by design: their reads of the job are
bounded each, :func:`answered_within` and consumers.gateway.sse) and the admin routes that replay or purge (they may move many entries in one call, and one cut off half-way would leave the operator unsure what
was moved).

One watchdog task looks at the requests in flight every ``TICK_S`` and cancels the late ones (a timer per
request, as ``asyncio.timeout`` sets, cost ~10 µs of the gateway's ~200 µs a request); it ends when none is
in flight, so nothing outlives the server.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable
from typing import TypeVar

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from consumers.gateway.errors import ApiError, redis_unavailable
from streams.sizes import short

log = logging.getLogger("streamcrew.gateway")
T = TypeVar("T")

BOUNDED = ("/jobs", "/tasks")
BOUNDED_READS = ("/queue/stats", "/dead", "/webhooks/dead")
READS = ("GET", "HEAD")
TICK_S = 0.1
# A job's event stream, and only that: a job may be named ``events`` (GET /jobs/events reads its record).
EVENT_STREAM = re.compile(r"/jobs/[^/]+/events")


def is_bounded(method: str, path: str) -> bool:
    if EVENT_STREAM.fullmatch(path):
        return False
    return path.startswith(BOUNDED) or (method in READS and path.startswith(BOUNDED_READS))


def unanswered(seconds: float) -> str:
    return f"the job store (Redis) did not answer within {seconds:g}s; retry later"


async def answered_within(seconds: float, call: Awaitable[T]) -> T:
    """``call``'s reply, or ``503 redis_unavailable`` once ``seconds`` pass: the answer deadline for a Redis call on
    a route the middleware leaves out (the rate limiter's, an event stream's first read), which waited out a hung
    Redis (~45 s of the client's timeouts and tries)."""
    try:
        async with asyncio.timeout(seconds):
            return await call
    except TimeoutError:
        raise ApiError(503, "redis_unavailable", unanswered(seconds), headers={"Retry-After": "1"}) from None


def late_message(method: str, seconds: float) -> str:
    said = unanswered(seconds)
    if method in READS:
        return said
    return f"{said} (a job sent with an id is safe to send again; an id-less one may have been queued)"


class _Waiting:
    """One request in flight: its task, when it is late, and whether the watchdog cancelled it."""

    __slots__ = ("task", "due", "cancelled")

    def __init__(self, task: asyncio.Task[object], due: float) -> None:
        self.task, self.due, self.cancelled = task, due, False


class AnswerDeadline:
    def __init__(self, app: ASGIApp, *, seconds: float) -> None:
        self.app = app
        self.seconds = seconds
        self._waiting: set[_Waiting] = set()
        self._watchdog: asyncio.Task[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        task = asyncio.current_task()
        if scope["type"] != "http" or task is None or not is_bounded(scope["method"], scope["path"]):
            await self.app(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        waiting = _Waiting(task, loop.time() + self.seconds)
        self._waiting.add(waiting)
        if self._watchdog is None:
            self._watchdog = loop.create_task(self._watch())

        async def receiving() -> Message:
            message = await receive()
            waiting.due = loop.time() + self.seconds
            return message

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                self._waiting.discard(waiting)  # answering: the body goes at the client's pace
            await send(message)

        try:
            await self.app(scope, receiving, sending)
        except asyncio.CancelledError:
            if not waiting.cancelled or task.uncancel() > 0:  # not ours, or cancelled by the server too
                raise
            log.warning("%s %s: no answer from Redis within %.1fs; answered 503", scope["method"], short(scope["path"]), self.seconds)
            await redis_unavailable(late_message(scope["method"], self.seconds))(scope, receive, send)
        finally:
            self._waiting.discard(waiting)

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._waiting:
                await asyncio.sleep(TICK_S)
                now = loop.time()
                for waiting in [w for w in self._waiting if w.due <= now and not w.cancelled]:
                    waiting.cancelled = True
                    waiting.task.cancel()
        finally:
            self._watchdog = None
