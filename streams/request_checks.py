"""What a producer's edge refuses before anything is queued (the gateway, ``streamcrew submit``, the Python API alike):
a webhook that is no absolute http(s) URL, a tenant with whitespace or control characters. A job queued with either
ran (its LLM calls paid) and its result was never delivered, or its tenant's figures split."""

from __future__ import annotations

import re

from pydantic import AnyHttpUrl, TypeAdapter, ValidationError

NAME_PATTERN = r"^[^\s\x00-\x1f\x7f]+$"
NAME_MAX_CHARS = 200
NOT_A_WEBHOOK = "webhook must be an absolute http:// or https:// URL"
_HTTP_URL = TypeAdapter(AnyHttpUrl)
_NAME = re.compile(NAME_PATTERN)


def webhook_url_problem(url: str) -> str | None:
    """Why ``url`` is no webhook a producer's edge should accept, or None (where it may lead: the notifier's SSRF guard)."""
    try:
        _HTTP_URL.validate_python(url)
    except ValidationError:
        return NOT_A_WEBHOOK
    return None


def name_problem(what: str, name: str) -> str | None:
    """Why ``name`` (a tenant, an agent) is none a producer's edge should accept, or None."""
    if not 1 <= len(name) <= NAME_MAX_CHARS:
        return f"{what} must be 1-{NAME_MAX_CHARS} characters"
    if not _NAME.match(name):
        return f"{what} must not contain whitespace or control characters"
    return None


def text_problem(what: str, value: str) -> str | None:
    """Why ``value`` cannot be sent as text (a lone surrogate: a str that is no Unicode), or None. Found before anything is
    queued: found while sending, it failed the rest of a batch half-published, naming no field."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return f"{what} is not valid Unicode text (it holds a lone surrogate)"
    return None
