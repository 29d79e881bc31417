"""Which addresses a webhook may reach: one set of rules for the notifier's SSRF guard and the gateway.

The notifier checks every address a webhook's host resolves to (``consumers.notifier.ssrf``); the gateway
checks only hosts written as IP literals, so a job whose webhook the notifier will refuse is ``422`` at once
instead of a webhook dead letter later. Both read the same settings (``STREAMCREW_ALLOW_PRIVATE``,
``STREAMCREW_ALLOW_LIST``) and decide here, so they agree. Nothing here resolves a name or opens a socket.

Refused: loopback, private, link-local, multicast, reserved, unspecified and other non-global ranges, IPv4
and IPv6 alike, including IPv4 embedded in IPv6 (``::ffff:127.0.0.1``, 6to4, Teredo, NAT64,
IPv4-compatible); cloud-metadata addresses even with ``allow_private``; an IP literal in a legacy form
(``127.1``, ``2130706433``). An allow-list entry (host, ``.suffix``, IP or CIDR) lifts all of it.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
from collections.abc import Iterable, Sequence
from typing import Annotated

import yarl
from pydantic import AfterValidator, BeforeValidator
from pydantic_settings import NoDecode

from streams.request_checks import NOT_A_WEBHOOK, webhook_url_problem  # noqa: F401 - the producers' edge check, kept importable here

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
        "fd20:ce::254",  # GCP IPv6
        "169.254.0.23",  # Tencent Cloud
        "169.254.42.42",  # Scaleway
        "fd00:42::42",  # Scaleway IPv6
        "fe80::a9fe:a9fe",  # OpenStack IPv6
    )
)
NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
SITE_LOCAL = ipaddress.ip_network("fec0::/10")  # deprecated (RFC 3879) but still routed inside some networks
# What lifts a refusal of a private address, and of a cloud-metadata one: the notifier's operator reads the first
# pair in a dead letter, the gateway's caller the second in a 422.
NOTIFIER_HINTS = ("--allow-private or the allow-list", "the allow-list")
GATEWAY_HINTS = ("STREAMCREW_ALLOW_PRIVATE or STREAMCREW_ALLOW_LIST, set alike for the notifier and the gateway",
                 "STREAMCREW_ALLOW_LIST, set alike for the notifier and the gateway")


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


def url_host(url: yarl.URL) -> str:
    """The host as the rules see it: lower case, no trailing dot (``127.0.0.1.`` is ``127.0.0.1``), and a name in its
    ASCII (IDNA) form, the one the connection resolves: the Unicode form of some (an emoji's) cannot be encoded again."""
    return (url.raw_host or "").lower().rstrip(".")


def ascii_host(name: str) -> str:
    """An allow-list host or ``.suffix`` as :func:`url_host` spells it (``bücher.de`` is ``xn--bcher-kva.de``)."""
    bare = name.lower().rstrip(".")
    dot = "." if bare.startswith(".") else ""
    try:
        return dot + (yarl.URL.build(scheme="http", host=bare[len(dot):]).raw_host or "")
    except (TypeError, ValueError, UnicodeError):
        return bare  # never matches a host a URL parses to; as the operator wrote it


class TargetRules:
    """``allow_private`` lifts the range checks except for cloud-metadata addresses; an ``allow_list`` entry
    (host, ``.suffix``, IP or CIDR) lifts them all."""

    def __init__(self, *, allow_private: bool = False, allow_list: Iterable[str] = ()) -> None:
        self.allow_private = allow_private
        self._hosts: set[str] = set()
        self._nets: list[IPNetwork] = []
        for item in allow_list:
            try:
                self._nets.append(ipaddress.ip_network(item.strip("[]"), strict=False))
            except ValueError:
                self._hosts.add(ascii_host(item))

    def host_allowed(self, host: str) -> bool:
        return host in self._hosts or any(h.startswith(".") and (host.endswith(h) or host == h[1:]) for h in self._hosts)

    def address_problem(self, ip: IPAddress) -> str | None:
        """Why this address is refused under these rules, or None."""
        candidates: list[IPAddress] = [ip]
        if isinstance(ip, ipaddress.IPv6Address) and (v4 := embedded_ipv4(ip)) is not None:
            candidates.append(v4)
        if any(c in net for c in candidates for net in self._nets):
            return None
        reason = classify(ip)
        if reason is None or (self.allow_private and not reason.startswith("cloud-metadata")):
            return None
        return reason

    def refusal(self, host: str, ips: Sequence[IPAddress], *, literal: IPAddress | None,
                hints: tuple[str, str] = NOTIFIER_HINTS) -> str | None:
        """Why ``host`` may not be reached at ``ips`` (what it resolves to, or the ``literal`` it spells), or None;
        ``hints`` name what allows a private address and what allows a cloud-metadata one, for who reads it."""
        if self.host_allowed(host):
            return None
        for ip in ips:
            if problem := self.address_problem(ip):
                shown = host if literal is not None else f"{host} resolves to {ip}, which"
                how = hints[1] if problem.startswith("cloud-metadata") else hints[0]
                return f"{shown} is not a public address ({problem}); allow it with {how}"
        if literal is not None and host.strip("[]") != str(literal):
            return f"{host} is a legacy form of {literal}; write the address as {literal}"
        return None

    def literal_refusal(self, url: str) -> str | None:
        """Why the notifier will refuse ``url`` when its host is an IP literal, worded for the gateway's caller;
        None for a name (only the notifier resolves names) and for a URL yarl cannot parse (the notifier
        dead-letters it with the reason)."""
        if (found := _literal_host(url)) is None:
            return None
        host, literal = found
        return self.refusal(host, [literal], literal=literal, hints=GATEWAY_HINTS)


@functools.lru_cache(maxsize=4096)
def _literal_host(url: str) -> tuple[str, IPAddress] | None:
    """The host of ``url`` and the address it spells, or None for a name or a URL yarl cannot parse. Cached: a
    tenant's jobs name the same few webhooks, and the parse is most of the check's ~13 µs."""
    try:
        host = url_host(yarl.URL(url))
    except (TypeError, ValueError, UnicodeError):
        return None
    literal = ip_literal(host)
    return None if literal is None else (host, literal)


def _split(value: object) -> object:
    return value.replace(",", " ").split() if isinstance(value, str) else value


def _checked(items: list[str]) -> list[str]:
    out = []
    for item in items:
        item = item.strip().lower().strip("[]")
        if "/" in item:
            ipaddress.ip_network(item, strict=False)  # ValueError names the bad entry
        out.append(item)
    return out


# STREAMCREW_ALLOW_LIST as the notifier and the gateway read it: entries split on commas or spaces, CIDRs checked.
AllowList = Annotated[list[str], NoDecode, BeforeValidator(_split), AfterValidator(_checked)]
