"""One webhook POST: guarded, signed, bounded per endpoint, classified for the retry policy.

One pooled :class:`httpx.AsyncClient` serves every endpoint. A global
semaphore bounds requests in flight; the :class:`EndpointLimiter` bounds each
endpoint (scheme, host, port). A delivery the limiter will not queue, or that
waited ``QUEUE_WAIT_S`` in vain, answers ``BUSY``: the caller parks it in the
delayed set, so a slow endpoint never holds the slots other endpoints need.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from enum import StrEnum

import httpx

from consumers.notifier import metrics
from consumers.notifier.limiter import EndpointLimiter
from consumers.notifier.signing import Signer
from consumers.notifier.ssrf import Refused, SsrfGuard, Unresolvable, parse_url
from consumers.notifier.transport import LeanTransport

log = logging.getLogger("streamcrew.notifier.delivery")

MAX_RESPONSE_BYTES = 64 * 1024
ERROR_SNIPPET = 200
QUEUE_WAIT_S = 0.5  # longest wait for an endpoint's turn before the delivery is parked instead


class Kind(StrEnum):
    DELIVERED = "delivered"
    RETRY = "retry"
    GONE = "gone"
    REFUSED = "refused"
    BUSY = "busy"


@dataclass(slots=True)
class Attempt:
    """What one delivery attempt came to; ``status`` is None when no response arrived."""

    kind: Kind
    status: int | None = None
    error: str = ""
    retry_after_s: float | None = None
    seconds: float = 0.0

    @property
    def made(self) -> bool:
        """Whether a request went (or may have gone) out: counts against max_attempts."""
        return self.kind in (Kind.DELIVERED, Kind.RETRY, Kind.GONE)


def parse_retry_after(value: str | None, *, cap_s: float, now_s: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP-date), capped; None if absent or bad."""
    if not value:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - (time.time() if now_s is None else now_s)
        except (TypeError, ValueError, IndexError):
            return None
    if not math.isfinite(seconds):
        return None
    return min(max(0.0, seconds), cap_s)


class Deliverer:
    """POSTs signed bodies; never raises for a delivery problem: every outcome is an :class:`Attempt`."""

    def __init__(
        self, *, signer: Signer, guard: SsrfGuard, concurrency: int, per_endpoint: int,
        connect_timeout_s: float, timeout_s: float, retry_after_cap_s: float,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.signer = signer
        self.guard = guard
        self.timeout_s = timeout_s
        self.retry_after_cap_s = retry_after_cap_s
        self.limiter = EndpointLimiter(per_endpoint, queue_wait_s=QUEUE_WAIT_S, max_waiting=concurrency)
        self._global = asyncio.Semaphore(concurrency)
        self.client = httpx.AsyncClient(
            transport=transport or LeanTransport(guard),
            timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s),
            follow_redirects=False,
            trust_env=False,
        )

    async def aclose(self) -> None:
        await self.client.aclose()

    async def deliver(self, url: str, msg_id: str, body: bytes) -> Attempt:
        try:
            target = await self.guard.check(url)
        except Refused as exc:
            return Attempt(Kind.REFUSED, error=str(exc))
        except Unresolvable as exc:
            return Attempt(Kind.RETRY, error=str(exc))
        ep = self.limiter.enter(target.origin)
        if ep is None:
            return Attempt(Kind.BUSY, error=f"{target.origin} has {self.limiter.users(target.origin)} deliveries under way")
        try:
            try:
                if ep.sem.locked():
                    await asyncio.wait_for(ep.sem.acquire(), QUEUE_WAIT_S)
                else:
                    await ep.sem.acquire()  # free now: no timer, no task
            except TimeoutError:
                return Attempt(Kind.BUSY, error=f"{target.origin} stayed busy for {QUEUE_WAIT_S}s")
            try:
                async with self._global:
                    self.limiter.started(ep)
                    attempt = Attempt(Kind.RETRY, error="cancelled")
                    try:
                        attempt = await self._post(url, msg_id, body)
                    finally:
                        self.limiter.finished(ep, attempt.seconds)
                    return attempt
            finally:
                ep.sem.release()
        finally:
            self.limiter.leave(ep)

    async def _post(self, url: str, msg_id: str, body: bytes) -> Attempt:
        headers = self.signer.headers(msg_id, body)
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.timeout_s):
                async with self.client.stream("POST", parse_url(url), content=body, headers=headers) as response:
                    snippet = await _read_some(response)
        except Refused as exc:
            return Attempt(Kind.REFUSED, error=str(exc))
        except (TimeoutError, httpx.TimeoutException) as exc:
            return self._failed(started, f"timeout after {time.perf_counter() - started:.1f}s ({type(exc).__name__})")
        except httpx.HTTPError as exc:
            return self._failed(started, f"{type(exc).__name__}: {exc}".rstrip(": "))
        except Exception as exc:  # a delivery problem must become data, never kill the notifier
            log.exception("unexpected error delivering to %s", url)
            return self._failed(started, f"{type(exc).__name__}: {exc}".rstrip(": "))
        seconds = time.perf_counter() - started
        metrics.LATENCY.observe(seconds)
        status = response.status_code
        if 200 <= status < 300:
            return Attempt(Kind.DELIVERED, status=status, seconds=seconds)
        text = snippet[:ERROR_SNIPPET].decode(errors="replace").strip()
        error = f"HTTP {status}" + (f": {text}" if text else "")
        if status == 410:
            return Attempt(Kind.GONE, status=status, error=f"{error} (endpoint gone; not retried)", seconds=seconds)
        wait = parse_retry_after(response.headers.get("retry-after"), cap_s=self.retry_after_cap_s)
        return Attempt(Kind.RETRY, status=status, error=error, retry_after_s=wait, seconds=seconds)

    @staticmethod
    def _failed(started: float, error: str) -> Attempt:
        seconds = time.perf_counter() - started
        metrics.LATENCY.observe(seconds)
        return Attempt(Kind.RETRY, error=error, seconds=seconds)


async def _read_some(response: httpx.Response) -> bytes:
    """Read at most ``MAX_RESPONSE_BYTES`` of the body (enough for the error text; a huge body is not ours to hold)."""
    data = bytearray()
    try:
        async for chunk in response.aiter_raw():  # raw: no decompression of what we only skim
            data += chunk
            if len(data) >= MAX_RESPONSE_BYTES:
                break
    except httpx.StreamConsumed:  # a transport that read it already (tests' MockTransport)
        return response.content[:MAX_RESPONSE_BYTES]
    return bytes(data)
