"""Data as strict JSON: what a request's ``data`` may hold so that no reader on the way changes its meaning.

orjson reads integers past 64 bits as floats and writes NaN and Infinity as ``null``; stdlib json reads each
integer exactly. These checks keep a request's numbers as they were sent (every edge: gateway, producer, CLI,
Kafka, a raw XADD's worker).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

import orjson
from pydantic import BaseModel


def json_default(value: Any) -> Any:
    """orjson's fallback: pydantic models as their JSON form."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


# The integers orjson writes: 64 bits, signed or not.
JSON_INTS = range(-(2**63), 2**64)


def ints_as_json(value: Any) -> Any:
    """``value`` with integers orjson cannot write (past 64 bits: a raw writer's) as None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value if value in JSON_INTS else None
    if isinstance(value, dict):
        return {k: ints_as_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [ints_as_json(v) for v in value]
    return value


def json_bytes(value: Any) -> bytes:
    """``value`` as JSON for a reader (an HTTP answer, a webhook): orjson's, with what it cannot write mended.

    An integer past 64 bits is written as null. A value nested deeper than orjson writes (254 levels) is written by
    the stdlib: an agent's output of 250 levels, wrapped by its workflow's result and a record, went past it, and
    its workflow's record answered 500 over HTTP and reached webhooks as a string.
    """
    try:
        return orjson.dumps(value, default=json_default)
    except orjson.JSONEncodeError:
        # ints_as_json recurses (two frames a level): only when there is an integer to mend, so a deep value's
        # writing is the stdlib's alone (one level a frame, MAX_SHOWN_DEPTH within Python's limit)
        mended = ints_as_json(value) if _has_wide_int(value) else value
    try:
        return orjson.dumps(mended, default=json_default)
    except orjson.JSONEncodeError:
        return json.dumps(mended, default=json_default, ensure_ascii=False, separators=(",", ":")).encode()


# How deep a stored result may nest and still be shown parsed (streams.records): orjson reads 1,023 levels but writes
# 254, the stdlib writes deeper within Python's recursion limit (1,000 frames), which must leave room for its caller's.
MAX_SHOWN_DEPTH = 512


def parsed_json(text: str) -> Any:
    """``text``'s JSON value, or ``text`` itself when it is no JSON or nests past ``MAX_SHOWN_DEPTH``: a reader
    could not write that back (a raw writer's result of 900 levels answered 500), and the text loses nothing."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return text
    if text.count("[") + text.count("{") <= MAX_SHOWN_DEPTH:  # too few brackets to nest that deep: no walk
        return value
    try:
        orjson.dumps(value)  # written at C speed: 254 levels at most
    except orjson.JSONEncodeError:
        return text if _nests_deeper(value, MAX_SHOWN_DEPTH) else value
    return value


def encode_data(data: Any) -> str:
    """``data`` as strict JSON, or a ValueError naming what no JSON reader could take back.

    orjson refuses integers beyond 64 bits and writes NaN and Infinity (which ``1e400`` parses to)
    as ``null``; a request must not change its meaning on the way, so both are refused.
    """
    try:
        encoded = orjson.dumps(data, default=json_default)
    except orjson.JSONEncodeError as exc:
        raise ValueError(f"not encodable as JSON: {exc}") from None
    if b"null" in encoded and _has_non_finite(data):
        raise ValueError("holds NaN or Infinity (a number like 1e400 overflows to Infinity); JSON has neither")
    return encoded.decode()


# An integer literal of 19 digits or more: maybe beyond 64 bits, which orjson reads as a float.
_LONG_INTEGER = re.compile(r"-?\d{19,}")
INT_MIN, UINT_MAX = -(2**63), 2**64 - 1


def has_wide_integer(text: str) -> bool:
    """Whether JSON ``text`` holds an integer beyond 64 bits (orjson would read it as a float, changing its
    meaning). The regex keeps the exact parse, stdlib json's, to the rare text with a long run of digits.

    Raises :class:`TooDeep` for a text nested too deeply for that parse (orjson reads up to 1,023 levels).
    """
    if not _LONG_INTEGER.search(text):
        return False
    wide = False

    def check(literal: str) -> int:
        nonlocal wide
        if len(literal) > 21:  # past any 64-bit integer (20 digits and a sign); int() refuses 4,300 digits outright
            wide = True
            return 0
        value = int(literal)
        wide = wide or not INT_MIN <= value <= UINT_MAX
        return value

    try:
        json.loads(text, parse_int=check)  # each integer literal as it is read: no walk of the result after
    except RecursionError:
        raise TooDeep("is nested too deeply to check its integers (an integer of 19 digits or more in data nested "
                      "hundreds of levels deep); nest it less, or send long numbers as strings") from None
    return wide


class TooDeep(ValueError):
    """JSON nested deeper than a check of it can go (Python's recursion limit)."""


def _nests_deeper(value: Any, levels: int) -> bool:
    """Whether ``value`` nests lists and objects more than ``levels`` deep; walked with a stack, not recursion."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = item.values()
        elif not isinstance(item, list | tuple):
            continue
        if depth > levels:
            return True
        stack.extend((v, depth + 1) for v in item)
    return False


def _has_wide_int(value: Any) -> bool:
    """Whether ``value`` holds an integer orjson cannot write (past 64 bits)."""
    return _any_leaf(value, lambda item: isinstance(item, int) and not isinstance(item, bool) and item not in JSON_INTS)


def _has_non_finite(value: Any) -> bool:
    """Whether any float in ``value`` is NaN or infinite (asked when orjson wrote a ``null``, which either may be).

    The stdlib's C encoder answers that with ``allow_nan=False`` 5 – 8 times faster than a walk in Python (a
    1.9 MiB list of 0s and one null: 21 ms against 108 ms, the walk run twice per request held a gateway for
    ~1 s); only a value it cannot write (a datetime orjson wrote, a reader's own type) is walked."""
    try:
        json.dumps(value, allow_nan=False, default=json_default)
    except ValueError as exc:
        if str(exc).startswith("Out of range float values"):
            return True
    except (TypeError, RecursionError):
        pass
    else:
        return False
    return _any_leaf(value, lambda item: isinstance(item, float) and not math.isfinite(item))


def _any_leaf(value: Any, test: Callable[[Any], bool]) -> bool:
    """Whether any value in ``value`` that is no list or object passes ``test``; walked with a stack, not recursion
    (data may nest 1,023 levels deep)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
        elif test(item):
            return True
    return False
