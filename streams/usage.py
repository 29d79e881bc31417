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
    try:  # None too: an instance raised again (a shared constant, a breaker's stored error) keeps no earlier attempt's
        setattr(exc, ATTEMPT_USAGE, usage)
    except (AttributeError, TypeError):
        pass


def of_failure(exc: BaseException) -> dict[str, Any] | None:
    """The usage attached to ``exc``, taken once (the attribute is cleared)."""
    usage = getattr(exc, ATTEMPT_USAGE, None)
    if usage is not None:
        try:
            delattr(exc, ATTEMPT_USAGE)
        except AttributeError:
            pass
    return usage if isinstance(usage, dict) else None


def parse(stored: str | None) -> dict[str, Any] | None:
    """A record's ``usage`` field; None when absent or not a usage object (the record is Redis data anyone may write)."""
    if not stored:
        return None
    try:
        usage = orjson.loads(stored)
    except orjson.JSONDecodeError:
        return None
    return clean(usage) if isinstance(usage, dict) else None


MAX_TOKENS = 2**53  # past it a total is not exact in JSON readers (and past 2**64 orjson cannot write it)


def clean(usage: dict[str, Any]) -> dict[str, Any]:
    """A usage object with only the ledger's fields, of their types and within bounds."""
    out: dict[str, Any] = {
        "model": ",".join(_models(usage))[:1024],
        "prompt_tokens": _tokens(usage, "prompt_tokens"),
        "completion_tokens": _tokens(usage, "completion_tokens"),
        "cost_usd": _cost(usage),
    }
    if usage.get("offline") is True:
        out["offline"] = True
    return out


def stored(usage: dict[str, Any] | None) -> str:
    """The record's ``usage`` field a retry or a hand-back writes ('' = none)."""
    return orjson.dumps(usage).decode() if usage else ""


def _tokens(usage: dict[str, Any], name: str) -> int:
    value = usage.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < MAX_TOKENS else 0


def _cost(usage: dict[str, Any]) -> float | None:
    """The cost in USD, or None when unknown (null, absent, or no plausible amount)."""
    cost = usage.get("cost_usd")
    return float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) and 0 <= cost < 1e12 else None


def _models(usage: dict[str, Any]) -> list[str]:
    model = usage.get("model")
    return [name for name in model.split(",") if name] if isinstance(model, str) else []


def add(before: dict[str, Any] | None, more: dict[str, Any] | None) -> dict[str, Any] | None:
    """``before`` and ``more`` together; either alone when the other is None."""
    if before is None or more is None:
        return more if before is None else before
    models = list(dict.fromkeys([*_models(before), *_models(more)]))  # each once, in the order first used
    costs = [_cost(before), _cost(more)]
    out: dict[str, Any] = {
        "model": ",".join(models),
        "prompt_tokens": _tokens(before, "prompt_tokens") + _tokens(more, "prompt_tokens"),
        "completion_tokens": _tokens(before, "completion_tokens") + _tokens(more, "completion_tokens"),
        "cost_usd": None if None in costs else round(sum(c for c in costs if c is not None), 8),
    }
    if before.get("offline") is True or more.get("offline") is True:
        out["offline"] = True
    return out
