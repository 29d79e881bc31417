"""The offline model: mock-llm's deterministic answers, in process, when no base URL is set.

Every call is recorded with ``offline=True`` and the model name
``offline-mock``, so a result's usage says where its text came from.
"""

from __future__ import annotations

from typing import Any

from agents.llm import metrics, mock_logic, providers
from agents.llm.providers import ChatResult
from agents.usage import record_usage

OFFLINE_MODEL = "offline-mock"


class OfflineModel:
    """A ``ChatModel`` that never leaves the process; it costs nothing."""

    model = OFFLINE_MODEL

    async def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        stop: list[str] | None = None,
    ) -> ChatResult:
        return self.complete(messages, tools=tools)

    def complete(self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None) -> ChatResult:
        """The same answer ``chat`` gives, callable from sync code (no I/O happens)."""
        body = providers.openai_body(OFFLINE_MODEL, messages, tools, None, None, None)
        content, calls, finish, prompt_tokens, completion_tokens, _ = providers.parse_openai(mock_logic.openai_response(body))
        metrics.LLM_REQUESTS.labels(OFFLINE_MODEL, "offline").inc()
        metrics.record_call(OFFLINE_MODEL, prompt_tokens, completion_tokens, 0.0)
        record_usage(OFFLINE_MODEL, prompt_tokens, completion_tokens, 0.0, offline=True)
        return ChatResult(content, OFFLINE_MODEL, prompt_tokens, completion_tokens, 0.0, calls, finish, offline=True)

    async def aclose(self) -> None:
        return None
