"""``StreamcrewLLM``: CrewAI's custom-LLM hook, routed through streamcrew's LLM client.

CrewAI calls ``call()`` from a worker thread (its agent steps are sync flow
methods); the request is handed to the worker's event loop, where the shared
client applies key rotation, retries, the concurrency cap, metrics and the
job's cost ledger. The offline model needs no loop and answers in the thread.
When the job's attempt ends while a step waits (its ``timeout_s``, a drain),
the crew's runner calls ``abort()``: the call in flight is cancelled on the
loop and the step's thread gets an error at once, instead of both running on
to the call's own timeout and retry budget.
A tool call whose arguments are not a JSON object is not run, and one naming a
tool the caller has not, or whose tool raises, has no result: each returns an
error the model can act on (the exception's URLs without credentials or query),
as CrewAI's executor does for native tool calls.
"""

from __future__ import annotations

import asyncio
import json
import threading
from concurrent.futures import CancelledError, Future
from typing import Any

from crewai import BaseLLM
from pydantic import PrivateAttr

from agents.llm.offline import OfflineModel
from agents.llm.providers import ChatModel, ChatResult
from agents.usage import UsageLedger, current_ledger
from streams.sizes import bounded_error

CONTEXT_WINDOW = 128_000


class StreamcrewLLM(BaseLLM):
    """A CrewAI LLM backed by a streamcrew ``ChatModel`` bound to one event loop."""

    llm_type: str = "streamcrew"
    _chat_model: ChatModel = PrivateAttr()
    _loop: asyncio.AbstractEventLoop = PrivateAttr()
    _in_flight: set[Future[ChatResult]] = PrivateAttr(default_factory=set)
    _aborted: bool = PrivateAttr(default=False)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @classmethod
    def bound(cls, chat_model: ChatModel, loop: asyncio.AbstractEventLoop) -> StreamcrewLLM:
        llm = cls(model=chat_model.model, provider="streamcrew")
        llm._chat_model = chat_model
        llm._loop = loop
        return llm

    def abort(self) -> None:
        """The run this LLM serves has ended: cancel its calls in flight from crew threads, refuse new ones."""
        with self._lock:
            self._aborted = True
            for future in list(self._in_flight):  # cancel() runs the done callback that discards it
                future.cancel()  # cancels the call's task on the loop; the thread's result() raises

    def _submit(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> Future[ChatResult]:
        """Hand a call from another thread to the loop, unless the run was aborted (checked under the lock abort takes)."""
        with self._lock:
            if self._aborted:
                raise CancelledError("the crew's run has ended")
            future = asyncio.run_coroutine_threadsafe(_in_ledger(current_ledger.get(), self._chat(messages, tools)), self._loop)
            self._in_flight.add(future)
        future.add_done_callback(self._in_flight.discard)
        return future

    def supports_function_calling(self) -> bool:
        return True

    def get_context_window_size(self) -> int:
        return CONTEXT_WINDOW

    def get_input_tokens_count(self, messages: Any, tools: Any = None, response_model: Any = None) -> int:
        """The mock-llm rule (four characters a token), without CrewAI's per-call warning."""
        if isinstance(messages, str):
            return (len(messages) + 3) // 4
        return sum(len(str(m.get("content") or "")) for m in messages) // 4

    def call(
        self,
        messages: str | list[Any],
        tools: list[dict[str, Any]] | None = None,
        callbacks: list[Any] | None = None,
        available_functions: dict[str, Any] | None = None,
        from_task: Any | None = None,
        from_agent: Any | None = None,
        response_model: Any | None = None,
    ) -> str | Any:
        msgs = _messages(messages)
        if isinstance(self._chat_model, OfflineModel):
            result = self._chat_model.complete(msgs, tools=tools)
        else:
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is self._loop:
                raise RuntimeError("StreamcrewLLM.call() ran on the event loop's thread; CrewAI should use acall() there")
            result = self._submit(msgs, tools).result()
        return self._answer(result, available_functions, from_task, from_agent)

    async def acall(
        self,
        messages: str | list[Any],
        tools: list[dict[str, Any]] | None = None,
        callbacks: list[Any] | None = None,
        available_functions: dict[str, Any] | None = None,
        from_task: Any | None = None,
        from_agent: Any | None = None,
        response_model: Any | None = None,
    ) -> str | Any:
        msgs = _messages(messages)
        if asyncio.get_running_loop() is self._loop:
            result = await self._chat(msgs, tools)
        else:
            result = await asyncio.wrap_future(self._submit(msgs, tools))
        return self._answer(result, available_functions, from_task, from_agent)

    async def _chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> ChatResult:
        return await self._chat_model.chat(messages, tools=tools or None, temperature=self.temperature, stop=self.stop_sequences or None)

    def _answer(self, result: ChatResult, available_functions: dict[str, Any] | None, from_task: Any, from_agent: Any) -> str | Any:
        self._track_token_usage_internal(
            {"prompt_tokens": result.prompt_tokens, "completion_tokens": result.completion_tokens,
             "total_tokens": result.prompt_tokens + result.completion_tokens}
        )
        if result.tool_calls:
            if not available_functions:
                return result.tool_calls  # native tool calling: the executor runs them
            call = result.tool_calls[0]["function"]
            args = _tool_arguments(call["name"], call["arguments"])
            if isinstance(args, str):
                return args
            return self._run_tool(call["name"], args, available_functions, from_task, from_agent)
        return self._apply_stop_words(result.content or "")

    def _run_tool(self, name: str, args: dict[str, Any], available_functions: dict[str, Any], from_task: Any, from_agent: Any) -> str:
        """The tool's result, through CrewAI's runner (its events); for an unknown tool or one that raised, an error the
        model can act on, where that runner returns None and its caller takes the call for an empty answer."""
        fn = available_functions.get(name)
        if fn is None:
            return f"Error: unknown tool {name!r}; available: {', '.join(available_functions)}."
        failed: list[str] = []

        def run(**kwargs: Any) -> Any:
            try:
                return fn(**kwargs)
            except Exception as exc:  # redacted before CrewAI logs it and puts it in its error event
                failed.append(bounded_error(f"{type(exc).__name__}: {exc}"))
                raise _ToolFailed(failed[0]) from None

        result = self._handle_tool_execution(name, args, {name: run}, from_task, from_agent)
        if failed or result is None:
            return f"Error: tool {name!r} failed: {failed[0] if failed else 'no result'}"
        return result


class _ToolFailed(Exception):
    """Raised in CrewAI's tool runner for a tool that raised; its message is the redacted one."""


def _messages(messages: str | list[Any]) -> list[dict[str, Any]]:
    if isinstance(messages, str):
        return [{"role": "user", "content": messages}]
    return [dict(m) for m in messages]


def _tool_arguments(name: str, text: str | None) -> dict[str, Any] | str:
    """The call's arguments, or the error that is its result: raising would fail the job's attempt and pay its calls again."""
    try:
        args = json.loads(text or "{}")
    except ValueError as exc:  # the parser's message gives the position, not the text
        return f"Error: the arguments of the {name!r} tool call are not valid JSON ({exc}); call it again with a JSON object."
    except RecursionError:  # nested deeper than Python's json reads (the client hands such text on as a note)
        return f"Error: the arguments of the {name!r} tool call are nested too deep to read; call it again with a flat JSON object."
    if not isinstance(args, dict):
        return f"Error: the arguments of the {name!r} tool call are not a JSON object; call it again with one."
    return args


async def _in_ledger(ledger: UsageLedger | None, coro: Any) -> ChatResult:
    """Run ``coro`` with the job's ledger, which lives in the calling thread's context."""
    token = current_ledger.set(ledger)
    try:
        result: ChatResult = await coro
        return result
    finally:
        current_ledger.reset(token)
