"""One webhook POST: guarded, signed, bounded per endpoint, classified for the retry policy.

One pooled aiohttp session (``http_client``) serves every endpoint. A global
semaphore bounds requests in flight; the :class:`EndpointLimiter` gives each
endpoint (scheme, host, port) a FIFO queue served at its own pace. A delivery
its queue will not take (a slow endpoint, or one over its share while others
compete), or that its queue sends away later, answers ``BUSY``: the caller
parks it in the delayed set, so a slow endpoint never holds the slots other
endpoints need, while a healthy one that is merely the bottleneck is waited for.
The attempt's deadline (``timeout_s``) covers name resolution, connect,
request and answer. A POST is never re-sent within one attempt: if the
connection fails after the request may have gone out, the attempt failed.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import ssl
import time
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import urljoin

import aiohttp

from consumers.notifier import http_client, metrics
from consumers.notifier.limiter import Busy, EndpointLimiter
from consumers.notifier.signing import Signer
from consumers.notifier.ssrf import Refused, SsrfGuard, Unresolvable, parse_url
from streams.raw import repaired
from streams.redact import KEY_RUN, Redactor, url_secrets
from streams.retry_after import parse_retry_after
from streams.urls import loggable_url

log = logging.getLogger("streamcrew.notifier.delivery")

MAX_RESPONSE_BYTES = 64 * 1024
ERROR_SNIPPET = 200
MAX_REDIRECT_CHARS = 200
QUEUE_WAIT_S = 0.5  # a slow endpoint may queue what it drains in this time; the rest is parked


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
    backing_off: bool = False  # BUSY: wait at least the delay that grows with each park in a row, too

    @property
    def made(self) -> bool:
        """Whether a request went (or may have gone) out: counts against max_attempts."""
        return self.kind in (Kind.DELIVERED, Kind.RETRY, Kind.GONE)


class Deliverer:
    """POSTs signed bodies; never raises for a delivery problem: every outcome is an :class:`Attempt`."""

    def __init__(
        self, *, signer: Signer, guard: SsrfGuard, concurrency: int, per_endpoint: int,
        connect_timeout_s: float, timeout_s: float, retry_after_cap_s: float,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.signer = signer
        self.guard = guard
        self.timeout_s = timeout_s
        self.retry_after_cap_s = retry_after_cap_s
        self.limiter = EndpointLimiter(per_endpoint, pool=concurrency, queue_wait_s=QUEUE_WAIT_S)
        self._global = asyncio.Semaphore(concurrency)
        self._concurrency = concurrency
        self._connect_timeout_s = connect_timeout_s
        self._ssl_context = ssl_context
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        """Created on first use, inside the running loop."""
        if self._session is None:
            self._session = http_client.session(self.guard, limit=self._concurrency, connect_timeout_s=self._connect_timeout_s,
                                                ssl_context=self._ssl_context)
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
        await self.guard.resolver.aclose()

    async def deliver(self, url: str, msg_id: str, body: bytes, *, returning: bool = False, tenant: str = "") -> Attempt:
        """One attempt; ``returning``: the delivery was parked as busy and comes back at its time; ``tenant``: the
        job's, on a delivery to the job's own webhook (held to the tenant's share in flight)."""
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.timeout_s):  # a resolver that never answers costs this attempt only
                target = await self.guard.check(url)
        except Refused as exc:
            return Attempt(Kind.REFUSED, error=str(exc))
        except Unresolvable as exc:
            return Attempt(Kind.RETRY, error=str(exc), seconds=time.perf_counter() - started)
        except TimeoutError:
            return Attempt(Kind.RETRY, error=f"timeout after {self.timeout_s:g}s resolving the host", seconds=self.timeout_s)
        budget_s = self.timeout_s - (time.perf_counter() - started)  # what resolving left; the queue wait is not an attempt
        queue = self.limiter.enter(target.origin, returning=returning, tenant=tenant)
        if isinstance(queue, Busy):
            return Attempt(Kind.BUSY, error=queue.reason, retry_after_s=queue.wait_s, backing_off=queue.growing)
        try:
            if not await self.limiter.turn(queue, tenant):
                busy = self.limiter.sent_away(queue, tenant)
                return Attempt(Kind.BUSY, error=busy.reason, retry_after_s=busy.wait_s, backing_off=busy.growing)
            seconds: float | None = None
            try:
                async with self._global:
                    attempt = await self._post(url, msg_id, body, budget_s)
                    seconds = attempt.seconds
                    return attempt
            finally:
                self.limiter.finished(queue, seconds, tenant)
        finally:
            self.limiter.leave(queue)

    async def _post(self, url: str, msg_id: str, body: bytes, budget_s: float) -> Attempt:
        headers = self.signer.headers(msg_id, body, url=url)
        started = time.perf_counter()
        # The status line is the answer (any 2xx: delivered); the body is only skimmed for the error text, so a
        # body that stalls or breaks after the status costs the connection, never the answer (not a retry).
        status: int | None = None
        snippet, skimmed = b"", ""
        retry_after = location = None
        try:
            async with asyncio.timeout(max(0.0, budget_s)):
                async with self.session.post(parse_url(url), data=body, headers=headers, allow_redirects=False) as response:
                    if not 100 <= response.status <= 599:  # aiohttp takes 000-099 as final; for us it is not HTTP
                        response.close()
                        return self._failed(started, f"protocol error: status {response.status:03d}")
                    status = response.status
                    retry_after = response.headers.get("retry-after")
                    location = response.headers.get("location")
                    snippet = await response.content.read(MAX_RESPONSE_BYTES)
                    if not response.content.at_eof():
                        response.close()  # a huge answer is not ours to read: drop the connection, not the memory
        except Refused as exc:
            return Attempt(Kind.REFUSED, error=str(exc))
        except TimeoutError:
            if status is None:
                return self._failed(started, f"timeout after {time.perf_counter() - started:.1f}s")
            skimmed = f"its body timed out after {time.perf_counter() - started:.1f}s"
        except aiohttp.ClientError as exc:
            if status is None:
                return self._failed(started, peer_text(describe(exc), url))  # a parser's error may quote the answer
            skimmed = f"its body failed: {peer_text(describe(exc), url)}"
        except Exception as exc:  # a delivery problem must become data, never kill the notifier
            log.error("unexpected %s delivering job %s (no traceback: it may quote the URL)", type(exc).__name__, msg_id)
            return self._failed(started, type(exc).__name__)
        seconds = time.perf_counter() - started
        metrics.LATENCY.observe(seconds)
        if 200 <= status < 300:
            return Attempt(Kind.DELIVERED, status=status, seconds=seconds)
        if 300 <= status < 400 and location:
            error = f"HTTP {status}: redirect to {redirect_target(url, location)} not followed (give the job that webhook URL)"
        else:
            text = answer_text(snippet, url)
            error = f"HTTP {status}" + (f": {text}" if text else f" ({skimmed})" if skimmed else "")
        if status == 410:
            return Attempt(Kind.GONE, status=status, error=f"{error} (endpoint gone; not retried)", seconds=seconds)
        wait = parse_retry_after(retry_after, cap_s=self.retry_after_cap_s)
        return Attempt(Kind.RETRY, status=status, error=error, retry_after_s=wait, seconds=seconds)

    @staticmethod
    def _failed(started: float, error: str) -> Attempt:
        seconds = time.perf_counter() - started
        metrics.LATENCY.observe(seconds)
        return Attempt(Kind.RETRY, error=error, seconds=seconds)


def redirect_target(url: str, location: str) -> str:
    """Where a 3xx pointed, for the dead letter: the receiver's own URL, without its credentials or query
    (a token there is no business of the log), cut short (the header is the receiver's text)."""
    try:  # aiohttp reads header bytes that are not UTF-8 as lone surrogates, which no JSON (a retry's record) holds
        target = loggable_url(urljoin(url, repaired(location).strip()))
    except ValueError:  # e.g. an unclosed IPv6 bracket
        target = "(unparseable URL)"
    return target if len(target) <= MAX_REDIRECT_CHARS else target[:MAX_REDIRECT_CHARS] + "..."


def answer_text(snippet: bytes, url: str) -> str:
    """An error answer's first ``ERROR_SNIPPET`` characters, cleaned (:func:`peer_text`) before they are cut: a secret
    that starts in the kept characters lies whole in the cleaned ones. Where cleaning shrank the text so much that
    the raw cut comes within reach, the cleaned text's last ``KEY_RUN`` characters go too: a secret cut there shows
    at most its head, and a head of ``KEY_RUN`` characters is masked already."""
    window = snippet[:ERROR_SNIPPET + 1024]
    text = peer_text(window.decode(errors="replace"), url)
    if len(snippet) > len(window) and len(text) < ERROR_SNIPPET + KEY_RUN:
        text = text[:max(0, len(text) - KEY_RUN)]
    return text[:ERROR_SNIPPET].strip()


def peer_text(text: str, url: str) -> str:
    """A receiver's words (its error page, a parser's quote of its answer) without what it was sent that is secret:
    the URL's credentials, their Basic form and its query values. Error pages and proxies quote the request back,
    and this text reaches the notifier's log, the webhook dead letter and ``streamcrew webhooks dead list``."""
    redactor = _url_redactor(url)
    return redactor(text) if redactor else text


@functools.lru_cache(maxsize=64)  # failures come in runs per endpoint; a long URL's runs are built once
def _url_redactor(url: str) -> Redactor:
    return Redactor([], url_secrets(parse_url(url)))


def describe(exc: aiohttp.ClientError) -> str:
    """What went wrong, from the exception's parts: aiohttp's own text can carry the URL (query, credentials)."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return f"TLS certificate of {exc.host}:{exc.port} not accepted: {exc.certificate_error}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"ConnectError: cannot connect to {exc.host}:{exc.port}: {exc.os_error.strerror or exc.os_error}"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "ServerDisconnectedError: the receiver closed the connection without a complete answer"
    if isinstance(exc, aiohttp.ClientResponseError):
        return f"protocol error: {str(exc.message)[:200]}"
    if isinstance(exc, aiohttp.ClientPayloadError):
        return "ClientPayloadError: the answer's body was cut short or malformed"
    if isinstance(exc, aiohttp.ClientOSError) and exc.errno:  # a reset: its strerror may be aiohttp's, quoting the URL
        return f"ClientOSError: {os.strerror(exc.errno)}"
    return type(exc).__name__
