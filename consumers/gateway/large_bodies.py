"""Large request bodies take turns, so one caller's large bodies cannot hold everyone's requests.

Reading a 2 MiB job body into its models holds the event loop ~65 ms (pydantic-core parses JSON at
~40 MB/s and keeps the GIL, so a thread would not free the loop). Six sent at once by one tenant held
another tenant's ``GET`` for all six in a row (0.31 – 0.44 s, against 3 ms): the six requests were ready
together, so the loop ran their parses back to back before it looked at its sockets again.

So a large body is parsed only in its turn: one at a time in the gateway, the next turn a few loop passes
after the last ended (requests that arrived meanwhile are read and go on first), and given round
robin over callers (their rate-limit bucket: an API key, or the client address when keys are off), so a
caller with one large body waits for one of each other caller's, never for a queue of them. Small bodies
never wait. A caller's waiting bodies may hold ``MAX_WAITING_BYTES``; one more, or one that waited past
``max_wait_s``, is ``429 too_many_large_bodies``: a waiting body is held in memory, where before the blocked loop
left the rest unread in the sockets.

A large stored result read back (``GET /jobs/{id}``, ``/result``, an event stream's event) is parsed in the same
turns, refused alike as ``429 too_many_large_results``: ten reads at once of one 0.86 MiB result held another
tenant's requests for all ten parses in a row.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator

from consumers.gateway.errors import ApiError

# Below this a body costs at most a few ms of the loop (the worst shape, ~8,000 numbers and a null: ~4 ms), and the
# usual small job ~0.1 ms, of which a turn's loop passes (~40 µs) would be a large share. 50 bodies of 63.9 KiB at once,
# under the first threshold (64 KiB), held another tenant up to 0.8 s; over this one, 41 ms.
LARGE_BODY_BYTES = 16 * 1024
# Loop passes a turn waits before its parse: requests that arrived during the last one are read and sent on to
# Redis first (each pass costs ~10 µs; measured, 4 passes answered another tenant better than 0.5 – 5 ms of sleep).
PASSES_BETWEEN_TURNS = 4
# Bytes of large bodies one caller may have waiting for their turn: 16 bodies of 2 MiB, ~1 s of parsing at worst.
MAX_WAITING_BYTES = 32 * 1_048_576
# How long a large body waits for its turn at most, as a share of STREAMCREW_REQUEST_TIMEOUT_S: it is answered 429
# before the answer deadline would answer 503 "Redis did not answer", which is not what happened.
MAX_WAIT_SHARE = 0.8


class LargeBodyTurns:
    """One large body parsed at a time, callers served round robin; small bodies pass at once."""

    def __init__(self, threshold: int = LARGE_BODY_BYTES, *, passes: int = PASSES_BETWEEN_TURNS,
                 max_waiting_bytes: int = MAX_WAITING_BYTES, max_wait_s: float = 4.0) -> None:
        self.threshold = threshold
        self.passes = passes
        self.max_waiting_bytes = max_waiting_bytes
        self.max_wait_s = max_wait_s
        self._busy = False
        self._waiting: dict[str, deque[tuple[asyncio.Future[None], int]]] = {}  # insertion order: the round robin

    def waiting(self) -> int:
        """Large bodies waiting for their turn (not the one in it)."""
        return sum(len(q) for q in self._waiting.values())

    @contextlib.asynccontextmanager
    async def turn(self, caller: str, size: int, *, what: str = "bodies") -> AsyncIterator[None]:
        """Hold the turn for the block when ``size`` (the body's bytes) is large; else at once. 429
        ``too_many_large_<what>`` when the caller's waiting ones would pass ``max_waiting_bytes``, or this one waited
        ``max_wait_s`` for its turn. ``what`` names the parse: request ``bodies``, or stored ``results`` read back."""
        if size < self.threshold:
            yield
            return
        await self._take(caller, size, what)
        try:
            for _ in range(self.passes):
                await asyncio.sleep(0)
            yield
        finally:
            self._pass_on()

    async def _take(self, caller: str, size: int, what: str) -> None:
        if not self._busy:
            self._busy = True
            return
        queue = self._waiting.get(caller) or deque()
        if (held := sum(n for _, n in queue)) and held + size > self.max_waiting_bytes:
            raise _refused(what, f"{len(queue)} large {what} (16 KiB or more, {held:,} bytes) of this key already wait to be "
                                 "parsed; send fewer at once")
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[caller] = queue
        queue.append((granted, size))
        try:
            async with asyncio.timeout(self.max_wait_s):
                await self._granted(caller, granted)
        except TimeoutError:
            raise _refused(what, f"this one of the large {what} waited {self.max_wait_s:g}s for its turn to be parsed (large "
                                 f"bodies and results are parsed one at a time); send fewer at once") from None

    async def _granted(self, caller: str, granted: asyncio.Future[None]) -> None:
        try:
            await granted
        except asyncio.CancelledError:  # the deadline's 503, our own wait's limit, a shutdown: pass the turn on if ours
            if granted.done() and not granted.cancelled():
                self._pass_on()
            else:
                self._forget(caller, granted)
            raise

    def _pass_on(self) -> None:
        """The turn to the next caller in order (who then goes to the back), or free."""
        while self._waiting:
            caller, queue = next(iter(self._waiting.items()))
            granted, _ = queue.popleft()
            del self._waiting[caller]
            if queue:
                self._waiting[caller] = queue  # back of the round
            if not granted.done():
                granted.set_result(None)
                return
        self._busy = False

    def _forget(self, caller: str, granted: asyncio.Future[None]) -> None:
        if (queue := self._waiting.get(caller)) is None:
            return
        for item in [item for item in queue if item[0] is granted]:
            queue.remove(item)
        if not queue:
            del self._waiting[caller]


def _refused(what: str, message: str) -> ApiError:
    return ApiError(429, f"too_many_large_{what}", message, headers={"Retry-After": "1"})
