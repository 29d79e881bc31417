"""SSRF guard: webhook URLs may only reach public addresses, checked before the request and again at connect.

A user-supplied webhook URL must not turn the notifier into a proxy into the
private network. The host is resolved and every address it resolves to is
checked: loopback, private, link-local, multicast, reserved, unspecified and
other non-global ranges are refused, IPv4 and IPv6 alike, including IPv4
embedded in IPv6 (``::ffff:127.0.0.1``, 6to4, Teredo, NAT64, IPv4-compatible).
The same check runs again when a connection is opened (``addresses``, called
by the transport), and the socket is opened to the address just checked, so a
DNS answer that changes between the check and the connect (rebinding) cannot
slip through. Names are resolved by :class:`~consumers.notifier.dns.Resolver`
(asynchronous, with its own timeout and caches). ``allow_private`` lifts
the range checks except for cloud-metadata addresses; an allow-list entry
(host, ``.suffix``, IP or CIDR) lifts them all. The rules themselves live in
:mod:`consumers.webhook_targets`, which the gateway applies to IP-literal hosts.
"""

from __future__ import annotations

import functools
import re
import time
import typing
from dataclasses import dataclass

import yarl

from consumers.notifier.dns import Resolver, Unresolvable
from consumers.webhook_targets import TargetRules, classify, ip_literal, url_host

__all__ = ["MAX_URL_CHARS", "Refused", "SsrfGuard", "Target", "Unresolvable", "classify", "parse_target", "parse_url"]

SCHEMES = frozenset({"http", "https"})
CACHE_S = 30.0
CACHE_MAX = 10_000
# Longest webhook URL and host name accepted, checked before anything is parsed or cached: the gateway caps URLs
# at 2,048 characters, a raw XADD has no cap, and the caches below keep their keys (RFC 1035: 253 for a name).
MAX_URL_CHARS = 8192
MAX_HOST_CHARS = 253
# A host name as resolvers take it (RFC 1123 labels, '_' too: compose service names have them), in its ASCII form.
_HOST_NAME = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?(?:\.[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?)*")


class Refused(Exception):
    """Raised when a webhook URL may not be fetched; the message is the reason, kept in the dead letter."""


@dataclass(frozen=True, slots=True)
class Target:
    scheme: str
    host: str
    port: int

    @property
    def origin(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"


@functools.lru_cache(maxsize=4096)
def parse_url(url: str) -> yarl.URL:
    """yarl's URL parse, cached: the same few URLs come back thousands of times a second (only URLs
    :func:`parse_target` accepted, so no key is over ``MAX_URL_CHARS``)."""
    return yarl.URL(url)


def parse_target(url: str) -> Target:
    """Scheme, host and port of a webhook URL; raises :class:`Refused` for anything not http(s) with a host,
    or longer than ``MAX_URL_CHARS`` (refused before it reaches a cache)."""
    if len(url) > MAX_URL_CHARS:
        raise Refused(f"URL too long: {len(url):,} characters, the limit is {MAX_URL_CHARS:,}")
    return _parse_target(url)


@functools.lru_cache(maxsize=4096)
def _parse_target(url: str) -> Target:
    try:
        parsed = parse_url(url)
        host = url_host(parsed)
        port = parsed.port
    except (TypeError, ValueError, UnicodeError) as exc:
        raise Refused(f"invalid URL: {type(exc).__name__}") from None
    if parsed.scheme not in SCHEMES:
        raise Refused(f"scheme {parsed.scheme[:20] or '(none)'!r} is not http or https")
    if not host:
        raise Refused("URL has no host")
    if len(host) > MAX_HOST_CHARS:
        raise Refused(f"host name too long: {len(host):,} characters, the limit is {MAX_HOST_CHARS}")
    if ip_literal(host) is None and not _HOST_NAME.fullmatch(host):  # no resolver takes it: dead-lettered now, not retried for minutes
        raise Refused("host is not a valid name: labels of 1-63 letters, digits, '-' or '_', joined by single dots")
    return Target(parsed.scheme, host, port or (443 if parsed.scheme == "https" else 80))


class SsrfGuard:
    """Decides whether a URL may be fetched; caches the answer per host for ``CACHE_S`` seconds."""

    def __init__(self, *, allow_private: bool = False, allow_list: typing.Iterable[str] = (),
                 resolver: Resolver | None = None) -> None:
        self.rules = TargetRules(allow_private=allow_private, allow_list=allow_list)
        self.resolver = resolver or Resolver()
        self._cache: dict[tuple[str, int], tuple[float, str | None]] = {}

    @staticmethod
    def parse(url: str) -> Target:
        return parse_target(url)

    async def check(self, url: str) -> Target:
        """Parse and check ``url``; raises :class:`Refused` (dead-letter) or :class:`Unresolvable` (retry)."""
        target = self.parse(url)
        if self.rules.host_allowed(target.host):
            return target
        key = (target.host, target.port)
        cached = self._cache.get(key)
        now = time.monotonic()
        if cached is None or cached[0] < now:
            try:
                await self.addresses(target.host, target.port)
                problem = None
            except Refused as exc:
                problem = str(exc)
            if len(self._cache) >= CACHE_MAX:
                self._cache.clear()
            cached = self._cache[key] = (now + CACHE_S, problem)
        if cached[1] is not None:
            raise Refused(cached[1])
        return target

    async def addresses(self, host: str, port: int) -> list[str]:
        """Resolve ``host`` (cached) and return its addresses, all checked; refuses if any one is not allowed."""
        literal = ip_literal(host)
        ips = [literal] if literal is not None else await self.resolver.resolve(host)
        if (refusal := self.rules.refusal(host, ips, literal=literal)) is not None:
            raise Refused(f"refused: {refusal}")
        return [str(ip) for ip in ips]
