"""URLs as they may appear in logs and errors: ``scheme://host:port/path``, never credentials or query."""

from __future__ import annotations

import re
from urllib.parse import SplitResult, urlsplit

# A URL inside a text (an exception's message): up to a space, a quote or an angle bracket.
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]+")


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


def without_url_secrets(text: str) -> str:
    """``text`` with each URL that has user info, a query or a fragment shown as :func:`loggable_url` shows it:
    httpx and aiohttp quote the URL a failed call asked for, and an agent's error text is copied far."""
    return _URL_IN_TEXT.sub(_url_shown, text)


def _url_shown(match: re.Match[str]) -> str:
    url = match.group()
    return loggable_url(url) if any(c in url for c in "@?#") else url
