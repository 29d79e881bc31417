"""A worker ``--app`` module for tests/agents/test_attempt_usage.py: agents whose failed attempts made LLM calls.

``breaker`` raises one shared exception instance (as a circuit breaker's stored error or a module constant is
raised again and again), after one call when ``data["call"]``; ``slow_call`` makes one call, logs that it did,
then sleeps ``data["sleep_s"]`` (a drain interrupts it there) and fails attempts 1..``fail_first``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from agents import AgentContext, agent, record_usage

BREAKER_OPEN = RuntimeError("upstream breaker open")
log = logging.getLogger("streamcrew.test_app")


@agent("breaker")
async def breaker(data: dict[str, Any], ctx: AgentContext) -> dict[str, Any]:
    if data.get("call"):
        record_usage("model-a", 100, 10, 0.001)
    raise BREAKER_OPEN


@agent("slow_call")
async def slow_call(data: dict[str, Any], ctx: AgentContext) -> dict[str, Any]:
    record_usage("model-a", data.get("prompt", 7), 1, 0.001)
    log.warning("slow_call: attempt %d called its model", ctx.attempt)
    await asyncio.sleep(data.get("sleep_s", 0))
    if ctx.attempt <= data.get("fail_first", 0):
        raise RuntimeError("slow_call fails on purpose")
    return {"ok": True}
