"""Bounds on what a job's ending writes: an agent's error text and result are copied to the result event, the
record, the dead letter and the webhook, so their size is checked (and a text cut) once, here."""

from __future__ import annotations

import re

from streams.urls import without_url_secrets

MAX_ERROR_CHARS = 4096  # of an error text kept in a result (bounded_error)
URL_SLACK = 2048  # read past the cut, so a URL across it is redacted whole
ERROR_READ_CHARS = MAX_ERROR_CHARS + URL_SLACK  # of an error text, all that is ever read
_CUT_NOTE = re.compile(r"\.\.\. \(\d{1,20} characters cut\)")


def bounded_error(error: str, unread: int = 0) -> str:
    """An agent's error text, its URLs without credentials or query (an HTTP client's error quotes them), cut to
    ``MAX_ERROR_CHARS``: an exception may quote a whole input. ``unread``: characters already cut from ``error``.
    A text it returned comes back as it was (the agent layer cuts an error it cleans of secrets; the worker again)."""
    text, unread = without_url_secrets(error[:ERROR_READ_CHARS]), unread + max(0, len(error) - ERROR_READ_CHARS)
    if len(text) <= MAX_ERROR_CHARS and not unread:
        return text
    if not unread and _CUT_NOTE.fullmatch(text, MAX_ERROR_CHARS):
        return text
    return f"{text[:MAX_ERROR_CHARS]}... ({len(text) - MAX_ERROR_CHARS + unread} characters cut)"


def too_large(encoded: str, limit: int) -> int:
    """The UTF-8 size of ``encoded`` when it is over ``limit``, else 0; encoded only when its length leaves a doubt."""
    if len(encoded) * 4 <= limit:  # 4 bytes per character at most: the common case costs no encoding
        return 0
    size = len(encoded.encode())
    return size if size > limit else 0


def short(text: str | None, limit: int = 300) -> str:
    """A text as a log line quotes it: cut at ``limit`` characters, and its control and format characters escaped
    (a newline in a hand-written job id, path or error must not start a forged log line of its own)."""
    text = text or ""
    return visible(text if len(text) <= limit else text[:limit] + "...")


def visible(text: str) -> str:
    """``text`` with its control and format characters (ESC, CR, a bidi override, a lone surrogate) as escapes: what
    a submitter wrote, shown in a log or on an operator's terminal, cannot drive it (clear it, plant a link)."""
    return text if text.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
