"""Wire formats: OpenAI chat completions and the Anthropic Messages API.

Callers speak one dialect, OpenAI's (``messages`` with ``tool_calls`` and
``tool`` turns, ``tools`` as function schemas) because CrewAI does too; this
module turns it into each provider's request and each response back into a
``Reply``. A response is validated at this edge (pydantic models below): one
of the wrong shape, or with a token count below 0 or above
``MAX_TOKENS_PER_CALL``, raises ``ValueError`` naming the first bad field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, NamedTuple, Protocol

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

Provider = Literal["openai", "anthropic"]
_OPENAI_MESSAGE_KEYS = ("role", "content", "name", "tool_calls", "tool_call_id")
MAX_TOKENS_PER_CALL = 10**9  # far above any context window; a larger count is a broken peer, not a bill


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
    """``https://host/v1`` and ``https://host`` both work for either provider; a query
    (``?api-version=...``) stays after the path, a fragment is dropped."""
    import yarl  # here, not at the top: the offline model imports this module and needs no URL

    url = yarl.URL(base_url)
    path = url.raw_path.rstrip("/")
    if not path.endswith("/v1"):
        path += "/v1"
    path += "/chat/completions" if provider == "openai" else "/messages"
    return str(url.with_path(path, encoded=True, keep_query=True))


def headers(provider: Provider, secret: str | None, anthropic_version: str) -> dict[str, str]:
    # identity: a compressed answer could unpack to far more than the response size limit
    out = {"content-type": "application/json", "accept": "application/json", "accept-encoding": "identity"}
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


def _input(args: Any) -> Any:
    """An earlier tool call's arguments as Anthropic's ``input`` object. Arguments that were not read (``_arguments``'
    note) or are not a JSON object go as an empty one: the tool's result, sent with it, says what was wrong, and
    raising here failed the crew's step on its next call."""
    if not isinstance(args, str):
        return args
    try:
        value = json.loads(args)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


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
                blocks.append({"type": "tool_use", "id": call.get("id"), "name": fn.get("name"), "input": _input(args)})
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


class Reply(NamedTuple):
    """One response, read: what ``ChatResult`` needs from the provider. ``counted``: it reported both token counts
    (an answer without them is no free call: its cost is unknown, not $0)."""

    content: str | None
    tool_calls: list[dict[str, Any]]
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    counted: bool = True


# What an answer may hold of what is read: only the first choice is used, so only it is validated (a body of 290,000
# choices took seconds of the event loop to validate), and tool calls or content blocks past these are refused.
MAX_TOOL_CALLS = 256
MAX_CONTENT_BLOCKS = 1024


# Strict: a count sent as "900000000" or true is no count (lax, it booked 900 M tokens, $378, or 1).
_Tokens = Annotated[int, Field(ge=0, le=MAX_TOKENS_PER_CALL, strict=True)] | None


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class OpenAIFunction(_Wire):
    name: str
    arguments: str | dict[str, Any] | None = None


class OpenAIToolCall(_Wire):
    id: str | None = None
    function: OpenAIFunction


class OpenAIMessage(_Wire):
    content: str | None = None
    tool_calls: list[OpenAIToolCall] | None = None


class OpenAIChoice(_Wire):
    message: OpenAIMessage
    finish_reason: str | None = None


class OpenAIUsage(_Wire):
    prompt_tokens: _Tokens = None
    completion_tokens: _Tokens = None


class OpenAIResponse(_Wire):
    choices: list[OpenAIChoice] = Field(min_length=1)
    usage: OpenAIUsage | None = None


class AnthropicBlock(_Wire):
    type: str
    text: str = ""
    id: str | None = None
    name: str | None = None
    input: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _tool_use_is_named(self) -> AnthropicBlock:
        if self.type == "tool_use" and not self.name:
            raise ValueError("a tool_use block needs a name")
        return self


class AnthropicUsage(_Wire):
    input_tokens: _Tokens = None
    output_tokens: _Tokens = None


class AnthropicResponse(_Wire):
    content: list[AnthropicBlock]
    stop_reason: str | None = None
    usage: AnthropicUsage | None = None


def _malformed(what: str, exc: ValidationError) -> ValueError:
    first = exc.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(part) for part in first["loc"]) or "body"
    more = f", and {exc.error_count() - 1} more" if exc.error_count() > 1 else ""
    return ValueError(f"a malformed {what} ({where}: {first['msg']}{more})")


def parse_openai(data: dict[str, Any]) -> Reply:
    choices = data.get("choices")
    if isinstance(choices, list) and len(choices) > 1:
        data = {**data, "choices": choices[:1]}
        choices = data["choices"]
    message = choices[0].get("message") if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None
    calls_sent = message.get("tool_calls") if isinstance(message, dict) else None
    if isinstance(calls_sent, list) and len(calls_sent) > MAX_TOOL_CALLS:
        raise ValueError(f"a malformed chat completion ({len(calls_sent)} tool calls, over the {MAX_TOOL_CALLS} read)")
    try:
        r = OpenAIResponse.model_validate(data)
    except ValidationError as exc:
        raise _malformed("chat completion", exc) from None
    choice, usage = r.choices[0], r.usage or OpenAIUsage()
    calls = [
        {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": _arguments(c.function.arguments)}}
        for c in choice.message.tool_calls or []
    ]
    return Reply(choice.message.content, calls, choice.finish_reason, usage.prompt_tokens or 0, usage.completion_tokens or 0,
                 counted=usage.prompt_tokens is not None and usage.completion_tokens is not None)


# Of a tool call's arguments handed on: their nesting. CrewAI reads them with Python's json, which raises RecursionError
# (failing the step) near 1,000 levels less the stack it runs on; orjson reads 1,024 levels and writes 254.
MAX_ARGUMENT_DEPTH = 254


def _arguments(value: str | dict[str, Any] | None) -> str:
    """The call's arguments as JSON text. Text that is not JSON is handed on as it is (the caller tells the model, and
    the step goes on) unless it might nest too deep to read: then, as text nested too deep, as a note saying why, not
    JSON either. Read as it came, a string nested 100,000 deep raised RecursionError in CrewAI, failing the step."""
    text = json.dumps(value) if isinstance(value, dict) else value or "{}"
    if text.count("[") + text.count("{") <= MAX_ARGUMENT_DEPTH:  # cannot nest deeper: the common case, not parsed here
        return text
    try:
        orjson.dumps(orjson.loads(text))  # loads: past 1,024 levels; dumps: past MAX_ARGUMENT_DEPTH
    except orjson.JSONDecodeError as exc:  # not JSON (handed on as it came, unless it may nest too deep) or too deep
        return f"(tool-call arguments not read: {exc})"
    except orjson.JSONEncodeError:
        return f"(tool-call arguments not read: nested over {MAX_ARGUMENT_DEPTH} levels deep)"
    return text


def parse_anthropic(data: dict[str, Any]) -> Reply:
    blocks = data.get("content")
    if isinstance(blocks, list) and len(blocks) > MAX_CONTENT_BLOCKS:
        raise ValueError(f"a malformed message ({len(blocks)} content blocks, over the {MAX_CONTENT_BLOCKS} read)")
    try:
        r = AnthropicResponse.model_validate(data)
    except ValidationError as exc:
        raise _malformed("message", exc) from None
    texts = [b.text for b in r.content if b.type == "text"]
    calls = [
        {"id": b.id, "type": "function", "function": {"name": b.name, "arguments": _arguments(b.input or {})}}
        for b in r.content if b.type == "tool_use"
    ]
    usage = r.usage or AnthropicUsage()
    return Reply(("".join(texts) if texts else None), calls, r.stop_reason, usage.input_tokens or 0, usage.output_tokens or 0,
                 counted=usage.input_tokens is not None and usage.output_tokens is not None)
