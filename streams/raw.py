"""What a raw stream entry may hold before it is read as a request: its size in bytes, its field count, UTF-8.

Anyone with Redis access can XADD anything to a lane; these checks run before any parsing, and
``repaired`` makes an entry that fails them safe to log, store as JSON and show.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

# The longest job id (the id alphabet's bound, streams.envelope): also how long a re-added field may be.
JOB_ID_MAX = 512
# A request has at most this many fields: §2 names ten, and a retry re-adds them in one Lua XADD.
MAX_REQUEST_FIELDS = 64
SOURCE_FIELD = "source_id"  # on re-added entries: the lane entry the producer wrote
ENTRY_ID = re.compile(r"^\d{1,19}-\d{1,19}$")
# Fields a worker adds when it puts a job back in its lane: bounded by their own validation, so on a re-added
# entry they do not count against the size limit (else a retry could push a request over it).
READDED_FIELDS = ("id", "submitted_at", SOURCE_FIELD)


def utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogateescape"))


def request_bytes(raw: Mapping[str, str]) -> int:
    """A request's encoded size in bytes; on an entry a worker re-added (it names its ``source_id``), without
    the fields the worker added, so a retry never pushes a request over the limit it passed."""
    if not ENTRY_ID.fullmatch(raw.get(SOURCE_FIELD, "")):
        return sum(utf8_len(k) + utf8_len(v) for k, v in raw.items())
    return sum(utf8_len(k) + utf8_len(v) for k, v in raw.items() if not (k in READDED_FIELDS and len(v) <= JOB_ID_MAX))


def request_field_count(raw: Mapping[str, str]) -> int:
    """A request's field count; on an entry a worker re-added, without the fields it added (as :func:`request_bytes`)."""
    if not ENTRY_ID.fullmatch(raw.get(SOURCE_FIELD, "")):
        return len(raw)
    return sum(1 for k in raw if k not in READDED_FIELDS)


def not_utf8(raw: Mapping[str, str]) -> str | None:
    """The first field name or value that was not UTF-8 on the wire (the client decodes with surrogateescape), or None."""
    for key, value in raw.items():
        for text in (key, value):
            if not text.isascii():
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:
                    return repaired(key)
    return None


def repaired(text: str) -> str:
    """``text`` with the bytes that were not UTF-8 as U+FFFD: safe to log, store as JSON and show."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def repaired_fields(raw: Mapping[str, str]) -> dict[str, str]:
    return {repaired(k): repaired(v) for k, v in raw.items()}
