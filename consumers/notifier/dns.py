"""Webhook host names to addresses: asynchronous, bounded in time and per domain, cached both ways.

Why not the loop's ``getaddrinfo``: it runs on a small thread pool, and a DNS
server that never answers one domain held every thread, so deliveries to
healthy hosts queued behind it for many seconds; failures were not cached, so
each retry paid again. Here lookups go through c-ares (``aiodns``, no
threads), each has its own timeout, one name is looked up once at a time
however many deliveries want it, one domain has at most ``per_domain``
lookups in flight, and answers (good or bad) are cached. A lookup beyond
``per_domain`` fails at once (the delivery is retried later) rather than
waiting for a slot: a silent DNS server then costs other names of its domain
a retry, never a wait. A domain is a registrable domain by the Public Suffix
List (``publicsuffixlist``, which ships the list: no download), so names under
a shared suffix (``co.uk``, ``herokuapp.com``) do not share one bound.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from collections.abc import Sequence

import aiodns
from publicsuffixlist import PublicSuffixList

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

CACHE_S = 30.0
NEGATIVE_CACHE_S = 10.0
CACHE_MAX = 10_000


class Unresolvable(Exception):
    """Raised when a host name does not resolve now (retried: DNS may recover)."""


_SUFFIXES = PublicSuffixList()


def domain_of(host: str) -> str:
    """The registrable domain (``a.b.slow.test`` -> ``slow.test``, ``x.evil.co.uk`` -> ``evil.co.uk``), or the
    name itself when it is a public suffix or has none: lookups under one domain share a bound."""
    name = host.lower().rstrip(".")
    return _SUFFIXES.privatesuffix(name) or name


class Resolver:
    """``resolve(host)`` -> addresses, or :class:`Unresolvable` within ``timeout_s``."""

    def __init__(self, *, timeout_s: float = 2.0, per_domain: int = 4, cache_s: float = CACHE_S,
                 negative_cache_s: float = NEGATIVE_CACHE_S, nameservers: Sequence[str] = ()) -> None:
        self.timeout_s = timeout_s
        self.per_domain = per_domain
        self.cache_s = cache_s
        self.negative_cache_s = negative_cache_s
        self.nameservers = list(nameservers)
        self._dns: aiodns.DNSResolver | None = None
        self._cache: dict[str, tuple[float, list[IPAddress] | str]] = {}
        self._inflight: dict[str, asyncio.Task[list[IPAddress] | str]] = {}
        self._domains: dict[str, int] = {}  # lookups in flight per domain

    async def resolve(self, host: str) -> list[IPAddress]:
        now = time.monotonic()
        cached = self._cache.get(host)
        if cached is None or cached[0] < now:
            task = self._inflight.get(host)
            if task is None:
                task = self._inflight[host] = asyncio.create_task(self._lookup(host))
                task.add_done_callback(lambda _: self._inflight.pop(host, None))
            answer = await asyncio.shield(task)  # a caller giving up never cancels the lookup others wait for
        else:
            answer = cached[1]
        if isinstance(answer, str):
            raise Unresolvable(answer)
        return answer

    async def _lookup(self, host: str) -> list[IPAddress] | str:
        answer: list[IPAddress] | str
        domain = domain_of(host)
        in_flight = self._domains.get(domain, 0)
        if in_flight >= self.per_domain:  # not cached: the next attempt may find a free slot
            return f"cannot resolve {host}: {in_flight} lookups under {domain} already in flight"
        self._domains[domain] = in_flight + 1
        try:
            async with asyncio.timeout(self.timeout_s):
                result = await self._channel().getaddrinfo(host, family=socket.AF_UNSPEC, type=socket.SOCK_STREAM)
            answer = list(dict.fromkeys(ipaddress.ip_address(n.addr[0].decode().split("%", 1)[0]) for n in result.nodes))
            if not answer:
                answer = f"cannot resolve {host}: no addresses"
        except TimeoutError:
            answer = f"cannot resolve {host}: DNS gave no answer within {self.timeout_s:g}s"
        except aiodns.error.DNSError as exc:
            answer = f"cannot resolve {host}: {exc.args[1] if len(exc.args) > 1 else exc}"
        except (UnicodeError, ValueError) as exc:
            answer = f"cannot resolve {host}: {exc}"
        finally:
            if (left := self._domains.pop(domain) - 1) > 0:
                self._domains[domain] = left
        if len(self._cache) >= CACHE_MAX:
            self._cache.clear()
        ttl = self.negative_cache_s if isinstance(answer, str) else self.cache_s
        self._cache[host] = (time.monotonic() + ttl, answer)
        return answer

    def _channel(self) -> aiodns.DNSResolver:
        if self._dns is None:
            kwargs: dict[str, object] = {"timeout": self.timeout_s, "tries": 1}
            if self.nameservers:
                kwargs["nameservers"] = self.nameservers
            self._dns = aiodns.DNSResolver(**kwargs)  # type: ignore[arg-type]
        return self._dns

    async def aclose(self) -> None:
        for task in list(self._inflight.values()):
            task.cancel()
        if self._dns is not None:
            await self._dns.close()
            self._dns = None
