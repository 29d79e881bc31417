"""``echo``: the built-in diagnostic agent smoke tests and benchmarks use (contract §5)."""

from __future__ import annotations

import asyncio
from typing import Any

from agents.registry import AgentContext, AgentRegistry
from streams.errors import Reject


async def echo(data: dict[str, Any], ctx: AgentContext) -> dict[str, Any]:
    """Return ``{"echo": data}`` (a workflow step: plus ``"inputs"``); ``sleep_s`` waits, ``fail_first`` fails attempts 1..n."""
    sleep_s = data.get("sleep_s", 0)
    fail_first = data.get("fail_first", 0)
    if not isinstance(sleep_s, int | float) or isinstance(sleep_s, bool) or sleep_s < 0:
        raise Reject(f"echo: sleep_s must be a number >= 0, got {sleep_s!r}")
    if not isinstance(fail_first, int) or isinstance(fail_first, bool) or fail_first < 0:
        raise Reject(f"echo: fail_first must be an integer >= 0, got {fail_first!r}")
    if sleep_s:
        await asyncio.sleep(sleep_s)
    if ctx.attempt <= fail_first:
        raise RuntimeError(f"echo: attempt {ctx.attempt} fails on purpose (fail_first={fail_first})")
    if ctx.parent is not None:
        return {"echo": data, "inputs": dict(ctx.inputs)}
    return {"echo": data}


def register_echo(registry: AgentRegistry) -> None:
    registry.add(echo, name="echo")
