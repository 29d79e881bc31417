"""Bounds on what a job's ending writes: an agent's error text and result are copied to the result event, the
record, the dead letter and the webhook, so their size is checked (and a text cut) once, here."""

from __future__ import annotations

MAX_ERROR_CHARS = 4096  # of an error text kept in a result (bounded_error)


def bounded_error(error: str) -> str:
    """An agent's error text, cut to ``MAX_ERROR_CHARS``: an exception may quote a whole input."""
    if len(error) <= MAX_ERROR_CHARS:
        return error
    return f"{error[:MAX_ERROR_CHARS]}... ({len(error) - MAX_ERROR_CHARS} characters cut)"


def too_large(encoded: str, limit: int) -> int:
    """The UTF-8 size of ``encoded`` when it is over ``limit``, else 0; encoded only when its length leaves a doubt."""
    if len(encoded) * 4 <= limit:  # 4 bytes per character at most: the common case costs no encoding
        return 0
    size = len(encoded.encode())
    return size if size > limit else 0


def short(text: str | None, limit: int = 300) -> str:
    """A text as a log line quotes it."""
    text = text or ""
    return text if len(text) <= limit else text[:limit] + "..."
