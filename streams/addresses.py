"""A Redis URL whose host name resolves to several addresses: one seed URL per address.

A Kubernetes headless Service or a compose alias shared by every cluster node (deploy/) is one name for
all the nodes. Left to the OS, a connect tries the addresses in turn behind one timeout, so a node that
hangs, resolved first, holds up a start until its socket timeout, every try (or for good, where the
resolver's order is fixed). Split into one seed per address, a start asks them as it asks a listed set
(streams.connection.answering_cluster_node): the next one a second after the last went silent.

Only plain ``redis://`` URLs are split: under TLS the certificate names the host, and an address in its
place would fail the check. The address that answered serves only as a cluster client's first node (the
cluster then names its nodes itself); a single Redis keeps its name, which a managed Redis moves to a new
address at a failover. A cluster client that reaches none of the nodes it learnt (the whole cluster back on new
addresses) asks the URL's nodes again as they resolve then (:func:`seed_nodes`). Errors and logs quote none of the URL:
it may hold a password.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from streams.seeds import DEFAULT_PORT, seed_urls

# A lookup that takes longer is left alone: the connect then resolves the name itself, and says what went wrong.
LOOKUP_TIMEOUT_S = 5.0


def _splittable(url: str) -> tuple[str, int] | None:
    """(host, port) of a plain redis:// URL naming a host by name; None for an address, TLS or a socket."""
    parts = urlsplit(url)
    if parts.scheme != "redis" or not parts.hostname:
        return None
    try:
        ipaddress.ip_address(parts.hostname.split("%", 1)[0])
    except ValueError:
        return parts.hostname, parts.port or DEFAULT_PORT
    return None


def _distinct(infos: Sequence[tuple[Any, ...]]) -> list[str]:
    """The distinct addresses of what ``getaddrinfo`` answered, in its order (TCP over two families: one entry each)."""
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _seeds(url: str, port: int, addresses: list[str]) -> list[str]:
    """One URL per address; [] for fewer than two."""
    if len(addresses) < 2:
        return []
    parts = urlsplit(url)
    userinfo, at, _ = parts.netloc.rpartition("@")

    def host(address: str) -> str:  # an IPv6 address in brackets, its zone's '%' percent-encoded as redis-py expects
        return f"[{address.replace('%', '%25')}]" if ":" in address else address

    return [urlunsplit((parts.scheme, f"{userinfo}{at}{host(a)}:{port}", parts.path, parts.query, parts.fragment)) for a in addresses]


async def _addresses(url: str) -> list[str]:
    """The addresses of ``url``'s host name, in the resolver's order; [] for nothing to resolve (an address, TLS, a
    socket) or a lookup that fails or hangs."""
    if (named := _splittable(url)) is None:
        return []
    try:
        async with asyncio.timeout(LOOKUP_TIMEOUT_S):
            infos = await asyncio.get_running_loop().getaddrinfo(*named, type=socket.SOCK_STREAM)
    except (OSError, TimeoutError):
        return []
    return _distinct(infos)


async def address_seeds(url: str) -> list[str]:
    """The one-address URLs of ``url``'s host name, in the resolver's order; [] when there is nothing to split (an
    address, a name with one address, TLS, a socket) or the lookup fails or hangs (the connect meets that itself)."""
    if (named := _splittable(url)) is None:
        return []
    return _seeds(url, named[1], await _addresses(url))


async def seed_nodes(url: str) -> list[tuple[str, int]]:
    """(host, port) of every node ``url`` names, looked up now: a plain ``redis://`` host name as each of its addresses
    (one node after another, as at a start), anything else as given (under TLS the certificate names the host).

    For a cluster client that reaches none of the nodes it knows: a whole cluster restarted on new addresses (pods
    rescheduled at once, a compose project brought down and up) is found again under the name it was configured with.
    """
    nodes: list[tuple[str, int]] = []
    for seed in seed_urls(url):
        parts = urlsplit(seed)
        port = parts.port or DEFAULT_PORT
        nodes.extend((address, port) for address in await _addresses(seed) or [unquote(parts.hostname or "localhost")])
    return list(dict.fromkeys(nodes))


def address_seeds_now(url: str) -> list[str]:
    """:func:`address_seeds` for a thread without a loop (the /metrics scrape), bound by the resolver's own timeout."""
    if (named := _splittable(url)) is None:
        return []
    try:
        infos = socket.getaddrinfo(*named, type=socket.SOCK_STREAM)
    except OSError:
        return []
    return _seeds(url, named[1], _distinct(infos))
