"""The deterministic chat model behind ``streamcrew mock-llm``, the offline model and tests.

One decision function, two wire shapes (OpenAI chat completions, Anthropic
Messages), so the server, the in-process offline model and unit tests agree
byte for byte. Rules, in order:

1. ``tools`` given and no tool result since the last user turn: call the tool
   whose name and description share the most words with the conversation
   (ties: the first), with arguments filled from its JSON schema.
2. Tool results present: answer from them, quoting each result.
3. Otherwise: a short answer that restates the last user message.

Token counts are derived from text length (one token per four characters,
at least one), so usage and cost are predictable in tests.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

MOCK_MODEL_PREFIX = "mock"
_WORD = re.compile(r"[a-z0-9]+")
_ID = re.compile(r"\b[A-Z]{2,5}-[A-Z0-9][A-Z0-9-]*\b")
_NUMBER = re.compile(r"\b\d+\b")
_STOPWORDS = frozenset(
    "a an and are as at be by can do for from has have i in is it its me my of on or our so that the this "
    "to was we what when where which who will with you your about customer question answer".split()
)
_ID_PREFIXES = {"order": "ORD", "sku": "SKU", "product": "SKU", "customer": "CUS", "return": "RMA"}


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(slots=True)
class Conversation:
    """Both wire formats reduced to what the decision needs."""

    texts: list[str] = field(default_factory=list)  # every message's text, in order
    last_user: str = ""
    tool_results: list[tuple[str, str]] = field(default_factory=list)  # (tool name, content) since last user turn
    tools: list[Tool] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Decision:
    text: str | None
    tool_name: str | None = None
    tool_args: dict[str, Any] | None = None
    call_id: str | None = None
    prompt_tokens: int = 1
    completion_tokens: int = 1


def tokens_of(text: str) -> int:
    """One token per four characters, at least one."""
    return max(1, (len(text) + 3) // 4)


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for block in content:
            if isinstance(block, dict):
                if "text" in block:
                    parts.append(str(block["text"]))
                elif block.get("type") == "tool_result":
                    parts.append(_text_of(block.get("content")))
                elif block.get("type") == "tool_use":
                    parts.append(json.dumps(block.get("input", {}), sort_keys=True))
            else:
                parts.append(str(block))
        return "\n".join(parts)
    return str(content)


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOPWORDS and len(w) > 2}


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:24]


def parse_openai(request: dict[str, Any]) -> Conversation:
    conv = Conversation()
    names_by_id: dict[str, str] = {}
    for message in request.get("messages") or []:
        role = message.get("role")
        text = _text_of(message.get("content"))
        for call in message.get("tool_calls") or []:
            fn = call.get("function") or {}
            names_by_id[str(call.get("id"))] = str(fn.get("name", ""))
            text += "\n" + str(fn.get("arguments", ""))
        conv.texts.append(text)
        if role == "user":
            conv.last_user, conv.tool_results = text, []
        elif role == "tool":
            name = message.get("name") or names_by_id.get(str(message.get("tool_call_id")), "tool")
            conv.tool_results.append((str(name), text))
    for tool in request.get("tools") or []:
        fn = tool.get("function", tool)
        conv.tools.append(Tool(str(fn.get("name", "")), str(fn.get("description", "")), fn.get("parameters") or {}))
    return conv


def parse_anthropic(request: dict[str, Any]) -> Conversation:
    conv = Conversation()
    system = request.get("system")
    if system:
        conv.texts.append(_text_of(system))
    names_by_id: dict[str, str] = {}
    for message in request.get("messages") or []:
        content = message.get("content")
        blocks = content if isinstance(content, list) else []
        results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
        for block in blocks:
            if isinstance(block, dict) and block.get("type") == "tool_use":
                names_by_id[str(block.get("id"))] = str(block.get("name", ""))
        text = _text_of(content)
        conv.texts.append(text)
        if message.get("role") == "user" and results:
            for block in results:
                name = names_by_id.get(str(block.get("tool_use_id")), "tool")
                conv.tool_results.append((name, _text_of(block.get("content"))))
        elif message.get("role") == "user":
            conv.last_user, conv.tool_results = text, []
    for tool in request.get("tools") or []:
        conv.tools.append(Tool(str(tool.get("name", "")), str(tool.get("description", "")), tool.get("input_schema") or {}))
    return conv


def _pick_tool(conv: Conversation) -> Tool:
    words = _words(conv.last_user)
    best, best_score = conv.tools[0], -1
    for tool in conv.tools:
        score = len(words & _words(tool.name.replace("_", " ") + " " + tool.description))
        if score > best_score:
            best, best_score = tool, score
    return best


def _variants(schema: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The non-null variant of a schema and whether null is allowed (``anyOf``, type lists)."""
    nullable = False
    for variant in schema.get("anyOf") or schema.get("oneOf") or []:
        if isinstance(variant, dict) and variant.get("type") == "null":
            nullable = True
        elif isinstance(variant, dict):
            schema = {**schema, **variant}
    kind = schema.get("type")
    if isinstance(kind, list):
        nullable = nullable or "null" in kind
        schema = {**schema, "type": next((k for k in kind if k != "null"), "string")}
    return schema, nullable


def _fill(name: str, schema: dict[str, Any], text: str) -> Any:
    """A value for one property from the text; None when an id-like field has no id in the text."""
    kind = schema.get("type")
    if schema.get("enum"):
        words = _words(text)
        options = list(schema["enum"])
        return max(options, key=lambda v: (len(words & _words(str(v))), -options.index(v)))
    if kind == "integer":
        match = _NUMBER.search(text)
        return int(match.group()) if match else 1
    if kind == "number":
        match = _NUMBER.search(text)
        return float(match.group()) if match else 1.0
    if kind == "boolean":
        return False
    if kind in ("array", "object"):
        return [] if kind == "array" else {}
    ids = _ID.findall(text)
    lowered = name.lower()
    for key, prefix in _ID_PREFIXES.items():
        if key in lowered:
            wanted = [i for i in ids if i.startswith(prefix + "-")]
            if wanted:
                return wanted[0]
            if lowered.endswith("id") or lowered == "sku":
                return None
    return " ".join(text.split())[:300]


def _arguments(tool: Tool, text: str) -> dict[str, Any]:
    properties: dict[str, Any] = tool.parameters.get("properties") or {}
    required = set(tool.parameters.get("required") or [])
    args: dict[str, Any] = {}
    for name, raw in properties.items():
        schema, nullable = _variants(raw if isinstance(raw, dict) else {})
        value = _fill(name, schema, text)
        if value is not None:
            args[name] = value
        elif name in required:
            args[name] = None if nullable else ""
    return args


def _answer(conv: Conversation) -> str:
    if conv.tool_results:
        quoted = "; ".join(f"{name} says: {' '.join(content.split())[:400]}" for name, content in conv.tool_results)
        return f"Here is what I found. {quoted}"
    topic = " ".join(conv.last_user.split())[:200]
    return f"Mock answer ({_digest(topic)[:8]}): you asked about {topic!r}."


def decide(conv: Conversation) -> Decision:
    """The deterministic answer for one conversation."""
    prompt_text = "\n".join(conv.texts) + "".join(json.dumps(t.parameters, sort_keys=True) + t.name + t.description for t in conv.tools)
    prompt_tokens = tokens_of(prompt_text)
    if conv.tools and not conv.tool_results:
        tool = _pick_tool(conv)
        context = conv.last_user or "\n".join(conv.texts)
        args = _arguments(tool, context)
        encoded = json.dumps(args, sort_keys=True)
        return Decision(None, tool.name, args, "call_" + _digest(prompt_text, tool.name), prompt_tokens, tokens_of(tool.name + encoded))
    text = _answer(conv)
    return Decision(text, prompt_tokens=prompt_tokens, completion_tokens=tokens_of(text))


def openai_response(request: dict[str, Any]) -> dict[str, Any]:
    """A chat.completion object for an OpenAI-style request."""
    d = decide(parse_openai(request))
    message: dict[str, Any] = {"role": "assistant", "content": d.text}
    if d.tool_name is not None:
        message["tool_calls"] = [
            {"id": d.call_id, "type": "function", "function": {"name": d.tool_name, "arguments": json.dumps(d.tool_args, sort_keys=True)}}
        ]
    return {
        "id": "chatcmpl-" + _digest(json.dumps(request, sort_keys=True, default=str)),
        "object": "chat.completion",
        "created": 0,
        "model": str(request.get("model") or MOCK_MODEL_PREFIX),
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if d.tool_name else "stop"}],
        "usage": {"prompt_tokens": d.prompt_tokens, "completion_tokens": d.completion_tokens, "total_tokens": d.prompt_tokens + d.completion_tokens},
    }


def anthropic_response(request: dict[str, Any]) -> dict[str, Any]:
    """A Messages API ``message`` object for an Anthropic-style request."""
    d = decide(parse_anthropic(request))
    content: list[dict[str, Any]] = []
    if d.text is not None:
        content.append({"type": "text", "text": d.text})
    if d.tool_name is not None:
        content.append({"type": "tool_use", "id": "toolu_" + (d.call_id or "")[5:], "name": d.tool_name, "input": d.tool_args})
    return {
        "id": "msg_" + _digest(json.dumps(request, sort_keys=True, default=str)),
        "type": "message",
        "role": "assistant",
        "model": str(request.get("model") or MOCK_MODEL_PREFIX),
        "content": content,
        "stop_reason": "tool_use" if d.tool_name else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": d.prompt_tokens, "output_tokens": d.completion_tokens},
    }
