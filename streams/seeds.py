"""Several Redis Cluster nodes in one URL: ``redis://[user:password@]host1:port1,host2:port2[/db][?options]``.

A cluster client learns every node from the first one that answers. A URL that names one node cannot
start a process while that node is down, nor ever again once a failover has replaced it for good; a
list of nodes (or a name that resolves to every node) can. Each seed is an ordinary one-host URL with
the list's scheme, credentials, path and query, so redis-py parses every part of it as usual.
Errors here quote none of the URL: it may hold a password.
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit, urlunsplit

from streams.errors import ConfigError

DEFAULT_PORT = 6379


def seed_urls(url: str) -> list[str]:
    """The one-host URLs a URL lists (``url`` itself when it names one host), in the order given."""
    try:
        parts = urlsplit(url)
    except ValueError:  # Python's check of a bracketed (IPv6) host; its message may quote part of a password
        raise ConfigError("the Redis URL does not parse: an IPv6 host goes in [brackets], and a '[' or ']' in the "
                          "password must be percent-encoded (%5B, %5D)") from None
    userinfo, at, hosts = parts.netloc.rpartition("@")
    if "," not in hosts:
        return [url]
    if parts.scheme == "unix":
        raise ConfigError("a unix:// Redis URL names one socket; list several nodes with redis:// or rediss://")
    names = [name.strip() for name in hosts.split(",")]
    seeds = [urlunsplit((parts.scheme, f"{userinfo}{at}{name}", parts.path, parts.query, parts.fragment)) for name in names]
    for number, seed in enumerate(seeds, start=1):
        try:
            named, port = urlsplit(seed).hostname, urlsplit(seed).port
        except ValueError:
            raise ConfigError(f"node {number} of the Redis URL's {len(seeds)} has a port that is not a number from 0 to 65535") from None
        if port == 0:  # read as 'none given' (6379) by the cluster client: never what was meant
            raise ConfigError(f"node {number} of the Redis URL's {len(seeds)} has port 0; a node's port is 1 to 65535")
        if not named:
            raise ConfigError(f"node {number} of the Redis URL's {len(seeds)} names no host (a comma too many?)")
    return seeds


def first_and_others(url: str) -> tuple[str, list[tuple[str, int]]]:
    """The first seed's URL (options, credentials and all) and (host, port) of the others, for a cluster
    client's ``from_url`` and ``startup_nodes``."""
    first, *others = seed_urls(url)
    # Percent-decoded, as redis-py decodes the first URL's host (an IPv6 zone: [fe80::1%25eth0])
    return first, [(unquote(parts.hostname or "localhost"), parts.port or DEFAULT_PORT) for parts in map(urlsplit, others)]
