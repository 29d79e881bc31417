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
(host, ``.suffix``, IP or CIDR) lifts them all.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
import time
import typing
from dataclasses import dataclass

import yarl

from consumers.notifier.dns import Resolver, Unresolvable

__all__ = ["MAX_URL_CHARS", "Refused", "SsrfGuard", "Target", "Unresolvable", "classify", "parse_target", "parse_url"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

METADATA_ADDRESSES: frozenset[IPAddress] = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean...
        "169.254.170.2",  # AWS ECS task metadata
        "169.254.170.23",  # AWS EKS Pod Identity agent
        "fd00:ec2::23",  # AWS EKS Pod Identity agent, IPv6
        "fd00:ec2::254",  # AWS IPv6
        "100.100.100.200",  # Alibaba Cloud
        "168.63.129.16",  # Azure wire server
        "192.0.0.192",  # Oracle Cloud
    )
)
NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
SITE_LOCAL = ipaddress.ip_network("fec0::/10")  # deprecated (RFC 3879) but still routed inside some networks
SCHEMES = frozenset({"http", "https"})
CACHE_S = 30.0
CACHE_MAX = 10_000
# Longest webhook URL and host name accepted, checked before anything is parsed or cached: the gateway caps URLs
# at 2,048 characters, a raw XADD has no cap, and the caches below keep their keys (RFC 1035: 253 for a name).
MAX_URL_CHARS = 8192
MAX_HOST_CHARS = 253


class Refused(Exception):
    """Raised when a webhook URL may not be fetched; the message is the reason, kept in the dead letter."""


def embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries, if it is one of the forms that route to it."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    if any(ip in net for net in NAT64) or (ip in IPV4_COMPATIBLE and int(ip) > 0xFFFF):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def classify(ip: IPAddress) -> str | None:
    """Why ``ip`` is not a public address (``"loopback"``, ``"private"``...), or None when it is."""
    if ip in METADATA_ADDRESSES:
        return "cloud-metadata"
    if isinstance(ip, ipaddress.IPv6Address) and (v4 := embedded_ipv4(ip)) is not None:
        inner = classify(v4)
        return f"{inner} (IPv4 {v4} embedded)" if inner else None
    if isinstance(ip, ipaddress.IPv6Address) and ip in SITE_LOCAL:
        return "site-local"
    for name in ("loopback", "link_local", "multicast", "unspecified", "private", "reserved"):
        if getattr(ip, f"is_{name}"):
            return name.replace("_", "-")
    return None if ip.is_global else "non-global"


def ip_literal(host: str) -> IPAddress | None:
    """The address ``host`` spells, canonical or legacy (``127.1``, ``0x7f.1``, ``2130706433``), or None for a name."""
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        pass
    if host and all(c in "0123456789abcdefx." for c in host) and host[0].isdigit():
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


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
        host = (parsed.host or "").lower().rstrip(".")
        port = parsed.port
    except (TypeError, ValueError, UnicodeError) as exc:
        raise Refused(f"invalid URL: {type(exc).__name__}") from None
    if parsed.scheme not in SCHEMES:
        raise Refused(f"scheme {parsed.scheme[:20] or '(none)'!r} is not http or https")
    if not host:
        raise Refused("URL has no host")
    if len(host) > MAX_HOST_CHARS:
        raise Refused(f"host name too long: {len(host):,} characters, the limit is {MAX_HOST_CHARS}")
    return Target(parsed.scheme, host, port or (443 if parsed.scheme == "https" else 80))


class SsrfGuard:
    """Decides whether a URL may be fetched; caches the answer per host for ``CACHE_S`` seconds."""

    def __init__(self, *, allow_private: bool = False, allow_list: typing.Iterable[str] = (),
                 resolver: Resolver | None = None) -> None:
        self.allow_private = allow_private
        self.resolver = resolver or Resolver()
        self._hosts: set[str] = set()
        self._nets: list[IPNetwork] = []
        for item in allow_list:
            try:
                self._nets.append(ipaddress.ip_network(item.strip("[]"), strict=False))
            except ValueError:
                self._hosts.add(item.lower().rstrip("."))
        self._cache: dict[tuple[str, int], tuple[float, str | None]] = {}

    @staticmethod
    def parse(url: str) -> Target:
        return parse_target(url)

    def host_allowed(self, host: str) -> bool:
        return host in self._hosts or any(h.startswith(".") and (host.endswith(h) or host == h[1:]) for h in self._hosts)

    def address_problem(self, ip: IPAddress) -> str | None:
        """Why this address is refused under the current settings, or None."""
        candidates: list[IPAddress] = [ip]
        if isinstance(ip, ipaddress.IPv6Address) and (v4 := embedded_ipv4(ip)) is not None:
            candidates.append(v4)
        if any(c in net for c in candidates for net in self._nets):
            return None
        reason = classify(ip)
        if reason is None or (self.allow_private and not reason.startswith("cloud-metadata")):
            return None
        return reason

    async def check(self, url: str) -> Target:
        """Parse and check ``url``; raises :class:`Refused` (dead-letter) or :class:`Unresolvable` (retry)."""
        target = self.parse(url)
        if self.host_allowed(target.host):
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
        if literal is not None:
            ips = [literal]
        else:
            ips = await self.resolver.resolve(host)
        if self.host_allowed(host):
            return [str(ip) for ip in ips]
        for ip in ips:
            if problem := self.address_problem(ip):
                shown = host if literal is not None else f"{host} resolves to {ip}, which"
                how = "the allow-list" if problem.startswith("cloud-metadata") else "--allow-private or the allow-list"
                raise Refused(f"refused: {shown} is not a public address ({problem}); allow it with {how}")
        if literal is not None and host.strip("[]") != str(literal):
            raise Refused(f"refused: {host} is a legacy form of {literal}; write the address as {literal}")
        return [str(ip) for ip in ips]
