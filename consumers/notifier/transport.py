"""A lean HTTP/1.1 transport for the notifier's httpx client: keep-alive per origin, sockets pinned to checked addresses.

httpx's default transport (httpcore) walks every pooled connection and polls
each idle socket on every request; measured here, one pool of 200 connections
caps a process at ~150 requests a second, and even 10 at ~700. A webhook needs
little of HTTP (a POST with a small body, a skimmed answer), so this transport
does just that (``http1.py``) over asyncio streams with a LIFO idle list per
origin.
Each socket is opened to an address the SSRF guard approved a moment before,
with TLS verified against the URL's host name, so DNS answers that change
after the check (rebinding) are never followed. How many connections an
origin gets is bounded by the caller (the per-endpoint semaphore).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from dataclasses import dataclass

import httpx

from consumers.notifier.http1 import ProtocolError, encode_request, read_response
from consumers.notifier.ssrf import SsrfGuard, Unresolvable

READ_CHUNK = 65536
MAX_BODY_BYTES = 64 * 1024  # a webhook answer is skimmed, never stored whole
KEEPALIVE_EXPIRY_S = 4.0  # under the 5 s idle timeout of common servers (uvicorn, node)
SWEEP_EVERY = 1000


@dataclass(eq=False)
class Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since: float = 0.0

    def reusable(self, now: float) -> bool:
        return not self.writer.is_closing() and not self.reader.at_eof() and now - self.idle_since < KEEPALIVE_EXPIRY_S

    def close(self) -> None:
        self.writer.close()


class Stale(Exception):
    """Raised when a reused keep-alive connection turns out closed before any answer (the server timed it out)."""


class LeanTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 only; ``ssl_context`` verifies https endpoints against the URL's host."""

    def __init__(self, guard: SsrfGuard, *, ssl_context: ssl.SSLContext | None = None) -> None:
        self.guard = guard
        self.ssl_context = ssl_context or ssl.create_default_context()
        self._idle: dict[tuple[str, str, int], list[Connection]] = {}
        self._requests = 0
        self._closed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        origin = (url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80))
        timeouts: dict[str, float | None] = request.extensions.get("timeout", {})
        body = await request.aread()
        self._requests += 1
        if self._requests % SWEEP_EVERY == 0:
            self._sweep()
        while (conn := self._take(origin)) is not None:
            try:
                return await self._exchange(conn, origin, request, body, timeouts)
            except Stale:
                continue  # nothing was answered on it: try the next one, or a fresh connection
        conn = await self._connect(origin, timeouts.get("connect"))
        try:
            return await self._exchange(conn, origin, request, body, timeouts)
        except Stale:
            raise httpx.RemoteProtocolError("server closed the connection without answering", request=request) from None

    def _take(self, origin: tuple[str, str, int]) -> Connection | None:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if conn.reusable(now):
                return conn
            conn.close()
        self._idle.pop(origin, None)
        return None

    def _sweep(self) -> None:
        now = time.monotonic()
        for origin, idle in list(self._idle.items()):
            keep = []
            for conn in idle:
                if conn.reusable(now):
                    keep.append(conn)
                else:
                    conn.close()
            if keep:
                self._idle[origin] = keep
            else:
                del self._idle[origin]

    async def _connect(self, origin: tuple[str, str, int], timeout: float | None) -> Connection:
        scheme, host, port = origin
        try:
            addresses = await self.guard.addresses(host, port)
        except Unresolvable as exc:
            raise httpx.ConnectError(str(exc)) from None
        tls = self.ssl_context if scheme == "https" else None
        last: Exception | None = None
        for address in addresses:
            try:
                async with asyncio.timeout(timeout):
                    reader, writer = await asyncio.open_connection(
                        address, port, ssl=tls, server_hostname=host if tls else None, limit=READ_CHUNK * 4
                    )
                return Connection(reader, writer)
            except TimeoutError:
                last = httpx.ConnectTimeout(f"connect to {host} ({address}) timed out")
            except (OSError, ssl.SSLError) as exc:
                last = httpx.ConnectError(f"{host} ({address}): {exc}")
        assert last is not None
        raise last

    async def _exchange(self, conn: Connection, origin: tuple[str, str, int], request: httpx.Request, body: bytes,
                        timeouts: dict[str, float | None]) -> httpx.Response:
        reused = conn.idle_since > 0
        try:
            data = encode_request(request.method, request.url.raw_path, request.headers.raw, body)
            try:
                conn.writer.write(data)
                async with asyncio.timeout(timeouts.get("write")):
                    await conn.writer.drain()
                async with asyncio.timeout(timeouts.get("read")):
                    answer = await read_response(conn.reader, max_body=MAX_BODY_BYTES)
            except (asyncio.IncompleteReadError, ConnectionResetError, BrokenPipeError) as exc:
                nothing = not isinstance(exc, asyncio.IncompleteReadError) or not exc.partial
                if reused and nothing:
                    raise Stale() from None
                raise
        except BaseException as exc:
            conn.close()
            if isinstance(exc, Stale | asyncio.CancelledError):
                raise
            raise _mapped(exc, request) from exc
        if answer.reusable and not self._closed:
            conn.idle_since = time.monotonic()
            self._idle.setdefault(origin, []).append(conn)
        else:
            conn.close()
        return httpx.Response(
            answer.status, headers=answer.headers, stream=httpx.ByteStream(answer.body),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": answer.reason.encode("latin-1")},
        )

    async def aclose(self) -> None:
        self._closed = True
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()


def _mapped(exc: BaseException, request: httpx.Request) -> httpx.HTTPError:
    if isinstance(exc, httpx.HTTPError):
        return exc
    if isinstance(exc, TimeoutError):
        return httpx.ReadTimeout("timed out waiting for the response", request=request)
    if isinstance(exc, ProtocolError | asyncio.IncompleteReadError):
        return httpx.RemoteProtocolError(str(exc) or type(exc).__name__, request=request)
    return httpx.ReadError(f"{type(exc).__name__}: {exc}", request=request)
