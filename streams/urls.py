"""URLs as they may appear in logs and errors: ``scheme://host:port/path``, never credentials or query."""

from __future__ import annotations

from urllib.parse import urlsplit


def loggable_url(url: str) -> str:
    """``url`` without user info, query or fragment; something short and harmless if it does not parse."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "(unparseable URL)"
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}{f':{port}' if port else ''}{parts.path}"
