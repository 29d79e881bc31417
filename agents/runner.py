"""Run one agent call: validate input, call async or sync, bound by a timeout, collect usage."""

from __future__ import annotations

import asyncio
import contextvars
from concurrent.futures import Executor
from typing import Any

from pydantic import BaseModel, ValidationError

from agents.llm.runtime import redact
from agents.registry import AgentContext, AgentSpec
from agents.usage import UsageLedger, current_ledger
from streams.errors import AgentFailed, Reject, RetryLater
from streams.sizes import ERROR_READ_CHARS, bounded_error
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


def _cleaned(text: str) -> str | None:
    """``text`` as the worker keeps it (its first ``ERROR_READ_CHARS``), cleaned of the LLM's secrets; None when it
    held none."""
    head = text[:ERROR_READ_CHARS]
    clean = redact(head)
    return None if clean == head else bounded_error(clean, unread=len(text) - len(head))


def _without_llm_secrets(exc: BaseException) -> BaseException | None:
    """A failure whose text quotes a configured LLM key (or the endpoint URL's secrets), said again without them;
    None when it quotes none. A reason (``Reject``, ``RetryLater``) is cleaned in place; a timeout's text is the
    worker's own."""
    if isinstance(exc, Reject | RetryLater):
        reason = _cleaned(exc.reason)
        if reason is not None:
            exc.reason, exc.args = reason, (reason,)
        return None
    if not isinstance(exc, Exception) or isinstance(exc, TimeoutError):
        return None
    try:
        said = str(exc) if isinstance(exc, AgentFailed) else f"{type(exc).__name__}: {exc}"
    except Exception:  # a broken __str__: the worker's own formatting meets it as before
        return None
    clean = _cleaned(said)
    return None if clean is None else AgentFailed(clean)


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
        cleaned = _without_llm_secrets(exc)
        if cleaned is None:
            raise
        attach_usage(cleaned, ledger.summary())
        raise cleaned from None  # not chained: the original's text is what must not be logged
    finally:
        current_ledger.reset(token)
    return output, ledger.summary()
