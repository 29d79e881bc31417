"""The notifier's HTTP client: aiohttp, its sockets pinned to addresses the SSRF guard just approved.

aiohttp speaks HTTP (llhttp parser, keep-alive pool); what is ours is where
it may connect. The connector's resolver is the guard itself: every new
connection resolves through :meth:`SsrfGuard.addresses` and opens to one of
the addresses it checked, so a DNS answer that changes after the check
(rebinding) is never followed, while TLS still sends SNI and verifies the
certificate against the URL's host name. IP literals never reach a resolver:
the guard's ``check`` refuses them before the request. Its protocol bounds
the interim (1xx) answers one request may get (:class:`InterimBound`).
"""

from __future__ import annotations

import functools
import socket
import ssl
from typing import Any, cast

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.client_proto import ResponseHandler
from aiohttp.http import HttpProcessingError, RawResponseMessage
from aiohttp.streams import StreamReader

from consumers.notifier.ssrf import Refused, SsrfGuard, Unresolvable

KEEPALIVE_S = 4.0  # under the 5 s idle timeout of common servers (uvicorn, node)
MAX_INTERIM = 10  # interim (1xx) answers one request may get before its status; more is a protocol error


class PinnedResolver(AbstractResolver):
    """aiohttp's resolver hook: the guard's checked addresses, or an error that names the reason."""

    def __init__(self, guard: SsrfGuard) -> None:
        self.guard = guard

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        try:
            addresses = await self.guard.addresses(host.lower().rstrip("."), port)
        except (Refused, Unresolvable) as exc:
            raise OSError(None, str(exc)) from None
        return [ResolveResult(hostname=host, host=a, port=port, family=socket.AF_INET6 if ":" in a else socket.AF_INET,
                              proto=0, flags=socket.AI_NUMERICHOST | socket.AI_NUMERICSERV) for a in addresses]

    async def close(self) -> None:
        await self.guard.resolver.aclose()


class InterimBound(ResponseHandler):
    """aiohttp's protocol, failing a request that gets more than ``MAX_INTERIM`` interim (1xx) answers.

    ``ClientResponse.start`` skips interim answers in a loop without limit: a receiver streaming
    ``102 Processing`` as fast as we read kept a core busy for the whole attempt, every other delivery waiting
    for it. Past the bound the request fails as a protocol error, the connection is closed, and the rest of
    what it sent is dropped unread.
    """

    def __init__(self, loop: Any) -> None:
        super().__init__(loop)
        self._interim = 0

    def feed_data(self, data: tuple[RawResponseMessage, StreamReader], size: int = 0) -> None:
        if self._interim > MAX_INTERIM:
            return
        code = data[0].code
        if 100 <= code < 200 and code != 101:  # as ClientResponse.start tells interim from final
            self._interim += 1
            if self._interim > MAX_INTERIM:
                self.set_exception(HttpProcessingError(message=f"more than {MAX_INTERIM} interim (1xx) answers before the status"))
                if self.transport is not None:
                    self.transport.close()
                return
        else:
            self._interim = 0
        super().feed_data(data, size)


class FreshConnector(aiohttp.TCPConnector):
    """Never hands out a pooled connection that received bytes while idle.

    A receiver that answers one request twice leaves a response in an idle
    connection's buffer; aiohttp checks that when a connection is released,
    but not when bytes arrive later, before reuse. Reusing it would credit
    that stray response to the next delivery; the connection is closed instead.
    Its connections speak :class:`InterimBound`.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._factory = cast("functools.partial[ResponseHandler]", functools.partial(InterimBound, loop=self._loop))

    async def _get(self, key: Any, traces: Any) -> Any:
        while (conn := await super()._get(key, traces)) is not None:
            protocol = conn.protocol
            if protocol is not None and not protocol.should_close:
                return conn
            conn.close()
        return None


def session(guard: SsrfGuard, *, limit: int, connect_timeout_s: float, ssl_context: ssl.SSLContext | None = None) -> aiohttp.ClientSession:
    """One session for every endpoint; per-endpoint bounds are the caller's (``EndpointLimiter``)."""
    connector = FreshConnector(
        resolver=PinnedResolver(guard), use_dns_cache=False, limit=limit, limit_per_host=0,
        keepalive_timeout=KEEPALIVE_S, ssl=ssl_context if ssl_context is not None else True,
    )
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s),
        cookie_jar=aiohttp.DummyCookieJar(),  # one receiver's cookies never travel to another
        auto_decompress=False,  # the answer is skimmed, never unpacked
        skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding"),
        trust_env=False,
        raise_for_status=False,
    )
