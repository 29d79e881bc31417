"""A job's ``usage`` over all its attempts: a failed attempt's LLM calls were paid for too.

The agent runner attaches a failed attempt's usage to the exception it raises (:func:`attach`); the
worker adds it to the usage of the job's earlier attempts, which a retry keeps in the job record
(``usage``, read back when the next attempt starts), so the result event counts every call of the run.
The rules are a ledger's (agents/usage.py): tokens add up; ``cost_usd`` is null once any part's is;
``offline`` is true once any part's is; ``model`` lists each model once, in the order first used.
"""

from __future__ import annotations

from typing import Any

import orjson

ATTEMPT_USAGE = "streamcrew_usage"  # the attribute a failed attempt's exception carries its usage in


def attach(exc: BaseException, usage: dict[str, Any] | None) -> None:
    """Give ``exc`` the usage of the attempt it ends (an exception that takes no attributes keeps none)."""
    if usage is not None:
        try:
            setattr(exc, ATTEMPT_USAGE, usage)
        except (AttributeError, TypeError):
            pass


def of_failure(exc: BaseException) -> dict[str, Any] | None:
    usage = getattr(exc, ATTEMPT_USAGE, None)
    return usage if isinstance(usage, dict) else None


def parse(stored: str | None) -> dict[str, Any] | None:
    """A record's ``usage`` field; None when absent or not a usage object (the record is Redis data anyone may write)."""
    if not stored:
        return None
    try:
        usage = orjson.loads(stored)
    except orjson.JSONDecodeError:
        return None
    return usage if isinstance(usage, dict) else None


def _tokens(usage: dict[str, Any], name: str) -> int:
    value = usage.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def add(before: dict[str, Any] | None, more: dict[str, Any] | None) -> dict[str, Any] | None:
    """``before`` and ``more`` together; either alone when the other is None."""
    if before is None or more is None:
        return more if before is None else before
    models: list[str] = []
    for part in (before, more):
        model = part.get("model")
        for name in model.split(",") if isinstance(model, str) else ():
            if name and name not in models:
                models.append(name)
    costs = [part.get("cost_usd") for part in (before, more)]
    out: dict[str, Any] = {
        "model": ",".join(models),
        "prompt_tokens": _tokens(before, "prompt_tokens") + _tokens(more, "prompt_tokens"),
        "completion_tokens": _tokens(before, "completion_tokens") + _tokens(more, "completion_tokens"),
        "cost_usd": None if any(not isinstance(c, int | float) or isinstance(c, bool) for c in costs)
        else round(sum(costs), 8),  # type: ignore[arg-type]  # numbers, checked
    }
    if before.get("offline") is True or more.get("offline") is True:
        out["offline"] = True
    return out
