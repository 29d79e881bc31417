"""Wire formats: OpenAI chat completions and the Anthropic Messages API.

Callers speak one dialect, OpenAI's (``messages`` with ``tool_calls`` and
``tool`` turns, ``tools`` as function schemas) because CrewAI does too; this
module turns it into each provider's request and each response back into a
``ChatResult``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from agents.llm.errors import LLMRequestError

Provider = Literal["openai", "anthropic"]
_OPENAI_MESSAGE_KEYS = ("role", "content", "name", "tool_calls", "tool_call_id")


@dataclass(frozen=True, slots=True)
class ChatResult:
    """One completion: text and/or OpenAI-style tool calls, with token counts and cost."""

    content: str | None
    model: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    offline: bool = False


class ChatModel(Protocol):
    """What an LLM agent calls: the HTTP client or the offline model."""

    model: str

    async def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        stop: list[str] | None = None,
    ) -> ChatResult: ...

    async def aclose(self) -> None: ...


def endpoint(base_url: str, provider: Provider) -> str:
    """``https://host/v1`` and ``https://host`` both work for either provider."""
    base = base_url.rstrip("/")
    suffix = "/chat/completions" if provider == "openai" else "/messages"
    return base + suffix if base.endswith("/v1") else base + "/v1" + suffix


def headers(provider: Provider, secret: str | None, anthropic_version: str) -> dict[str, str]:
    out = {"content-type": "application/json", "accept": "application/json"}
    if provider == "anthropic":
        out["anthropic-version"] = anthropic_version
        if secret:
            out["x-api-key"] = secret
    elif secret:
        out["authorization"] = f"Bearer {secret}"
    return out


def openai_body(model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                max_tokens: int | None, temperature: float | None, stop: list[str] | None) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": [{k: m[k] for k in _OPENAI_MESSAGE_KEYS if k in m} for m in messages]}
    if tools:
        body["tools"] = tools
    if max_tokens:
        body["max_tokens"] = max_tokens
    if temperature is not None:
        body["temperature"] = temperature
    if stop:
        body["stop"] = stop[:4]
    return body


def _blocks(content: Any) -> list[dict[str, Any]]:
    if content is None or content == "":
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b if isinstance(b, dict) else {"type": "text", "text": str(b)} for b in content]


def anthropic_body(model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                   max_tokens: int, temperature: float | None, stop: list[str] | None) -> dict[str, Any]:
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for m in messages:
        role = m.get("role")
        if role == "system":
            system.append(m.get("content") if isinstance(m.get("content"), str) else json.dumps(m.get("content")))
            continue
        if role == "tool":
            role, blocks = "user", [{"type": "tool_result", "tool_use_id": m.get("tool_call_id"), "content": str(m.get("content") or "")}]
        else:
            blocks = _blocks(m.get("content"))
            for call in m.get("tool_calls") or []:
                fn = call.get("function") or {}
                args = fn.get("arguments") or "{}"
                blocks.append({"type": "tool_use", "id": call.get("id"), "name": fn.get("name"), "input": json.loads(args) if isinstance(args, str) else args})
        role = "assistant" if role == "assistant" else "user"
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)  # Anthropic wants alternating turns
        else:
            turns.append({"role": role, "content": blocks})
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "messages": turns}
    if system:
        body["system"] = "\n\n".join(system)
    if tools:
        body["tools"] = [
            {"name": t["function"]["name"], "description": t["function"].get("description", ""), "input_schema": t["function"].get("parameters") or {"type": "object"}}
            for t in tools
        ]
    if temperature is not None:
        body["temperature"] = temperature
    if stop:
        body["stop_sequences"] = stop
    return body


def parse_openai(data: dict[str, Any]) -> tuple[str | None, list[dict[str, Any]], str | None, int, int]:
    try:
        choice = data["choices"][0]
        message = choice["message"]
    except (KeyError, IndexError, TypeError):
        raise LLMRequestError("malformed chat completion: no choices[0].message", 200) from None
    usage = data.get("usage") or {}
    calls = [
        {"id": c.get("id"), "type": "function", "function": {"name": c["function"]["name"], "arguments": c["function"].get("arguments") or "{}"}}
        for c in message.get("tool_calls") or []
    ]
    return message.get("content"), calls, choice.get("finish_reason"), int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)


def parse_anthropic(data: dict[str, Any]) -> tuple[str | None, list[dict[str, Any]], str | None, int, int]:
    content = data.get("content")
    if not isinstance(content, list):
        raise LLMRequestError("malformed message: no content list", 200)
    texts = [b.get("text", "") for b in content if b.get("type") == "text"]
    calls = [
        {"id": b.get("id"), "type": "function", "function": {"name": b.get("name"), "arguments": json.dumps(b.get("input") or {})}}
        for b in content if b.get("type") == "tool_use"
    ]
    usage = data.get("usage") or {}
    return ("".join(texts) if texts else None), calls, data.get("stop_reason"), int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0)
