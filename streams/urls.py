"""URLs as they may appear in logs and errors: ``scheme://host:port/path``, never credentials or query."""

from __future__ import annotations

from urllib.parse import SplitResult, urlsplit


def loggable_url(url: str) -> str:
    """``url`` without user info, query or fragment; something short and harmless if it does not parse.

    A Redis URL may list several cluster nodes (``host1:port1,host2:port2``, streams.seeds): each is kept.
    """
    try:
        parts = urlsplit(url)
        hosts = [_host_port(urlsplit(f"//{name.strip()}")) for name in parts.netloc.rpartition("@")[2].split(",")]
    except ValueError:
        return "(unparseable URL)"
    if "@" in parts.path:  # user info urlsplit did not take for one (no '//', a scheme it refuses, a '/' in a password)
        return "(unparseable URL)"
    return f"{parts.scheme}://{','.join(hosts)}{parts.path}"


def _host_port(parts: SplitResult) -> str:
    host, port = parts.hostname or "", parts.port
    if ":" in host:
        host = f"[{host}]"
    return f"{host}{f':{port}' if port else ''}"
