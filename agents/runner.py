"""Run one agent call: validate input, call async or sync, bound by a timeout, collect usage."""

from __future__ import annotations

import asyncio
import contextvars
from concurrent.futures import Executor
from typing import Any

from pydantic import BaseModel, ValidationError

from agents.registry import AgentContext, AgentSpec
from agents.usage import UsageLedger, current_ledger
from streams.errors import Reject
from streams.usage import attach as attach_usage


def _validate(spec: AgentSpec, data: dict[str, Any]) -> Any:
    if spec.input_model is None:
        return data
    try:
        return spec.input_model.model_validate(data)
    except ValidationError as exc:
        details = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'data'}: {e['msg']}" for e in exc.errors())
        raise Reject(f"invalid input for agent {spec.name!r}: {details}") from None


def _jsonable(output: Any) -> Any:
    if isinstance(output, BaseModel):
        return output.model_dump(mode="json")
    return output


async def run_agent(
    spec: AgentSpec,
    data: dict[str, Any],
    ctx: AgentContext,
    *,
    timeout_s: float | None = None,
    executor: Executor | None = None,
) -> tuple[Any, dict[str, Any] | None]:
    """Return ``(output, usage)``; raises what the agent raises, or TimeoutError, with the attempt's usage
    attached (streams.usage.of_failure)."""
    value = _validate(spec, data)
    args = (value, ctx) if spec.wants_ctx else (value,)
    ledger = UsageLedger()
    token = current_ledger.set(ledger)
    try:
        if spec.is_async:
            call = spec.fn(*args)
        else:
            context = contextvars.copy_context()
            call = asyncio.get_running_loop().run_in_executor(executor, context.run, spec.fn, *args)
        output = _jsonable(await (asyncio.wait_for(call, timeout_s) if timeout_s else call))
    except BaseException as exc:  # the calls a failed attempt made were paid for: the job's usage counts them
        attach_usage(exc, ledger.summary())
        raise
    finally:
        current_ledger.reset(token)
    return output, ledger.summary()
