"""The notifier's HTTP client: aiohttp, its sockets pinned to addresses the SSRF guard just approved.

aiohttp speaks HTTP (llhttp parser, keep-alive pool); what is ours is where
it may connect. The connector's resolver is the guard itself: every new
connection resolves through :meth:`SsrfGuard.addresses` and opens to one of
the addresses it checked, so a DNS answer that changes after the check
(rebinding) is never followed, while TLS still sends SNI and verifies the
certificate against the URL's host name. IP literals never reach a resolver:
the guard's ``check`` refuses them before the request. Its connections are
:class:`streams.http_pool.FreshConnector`'s (no stray answer reused, interim
answers bounded), as the LLM client's are.
"""

from __future__ import annotations

import socket
import ssl

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from consumers.notifier.ssrf import Refused, SsrfGuard, Unresolvable
from streams.http_pool import FreshConnector

KEEPALIVE_S = 4.0  # under the 5 s idle timeout of common servers (uvicorn, node)


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
