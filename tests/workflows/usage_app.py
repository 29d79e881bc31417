"""A worker ``--app`` module for the workflow usage tests: ``usage_probe`` records the LLM calls its data lists.

Each call in ``data["calls"]`` (``{"model", "prompt", "completion", "cost", "offline"}``, ``cost`` null for a
model with no price) goes into the job's ledger exactly as an LLM client's would (``record_usage``), so the
step's ``usage`` comes from the real worker and the workflow's total from the real Lua. ``data["fail_first"]``
fails attempts 1..n after their calls, as ``echo``'s does; ``data["returns"]``, when given, is its output (``null`` too).
"""

from __future__ import annotations

from typing import Any

from agents import AgentContext, agent, record_usage


@agent("usage_probe")
async def usage_probe(data: dict[str, Any], ctx: AgentContext) -> Any:
    for call in data.get("calls", []):
        record_usage(call["model"], call["prompt"], call["completion"], call["cost"], offline=call.get("offline", False))
    if ctx.attempt <= data.get("fail_first", 0):  # as echo's: its calls were made (and paid) all the same
        raise RuntimeError(f"usage_probe: attempt {ctx.attempt} fails on purpose")
    return data["returns"] if "returns" in data else {"calls": len(data.get("calls", []))}
