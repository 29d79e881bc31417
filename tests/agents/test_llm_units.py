"""Pure logic of agents/llm: settings, prices, Retry-After, key redaction (a loopback peer)."""

from __future__ import annotations

import asyncio
import email.utils
import json
import time
from pathlib import Path

import orjson
import pytest

from agents.llm import LLMClient, LLMRequestError, LLMSettings, PriceTable
from agents.llm.keys import KeyPool
from agents.llm.providers import endpoint
from streams.errors import ConfigError
from streams.retry_after import parse_retry_after
from tests.hostile import HostilePeer, response

SECRET = "sk-live-abcdef0123456789"


def test_settings_from_env_split_keys_and_never_show_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMCREW_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("STREAMCREW_LLM_API_KEYS", f"{SECRET}, sk-other-key-000000 ,")
    monkeypatch.setenv("STREAMCREW_LLM_PRICES", '{"my-model": [1, 2]}')
    s = LLMSettings()
    assert [k.get_secret_value() for k in s.api_keys] == [SECRET, "sk-other-key-000000"]
    assert s.model == "deepseek-v3.2" and not s.offline and s.prices == {"my-model": (1.0, 2.0)}
    assert SECRET not in repr(s) and SECRET not in str(s.model_dump())
    assert SECRET not in repr(KeyPool([SECRET], max_concurrency=1).keys)


def test_no_base_url_means_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STREAMCREW_LLM_BASE_URL", raising=False)
    assert LLMSettings().offline


def test_prices_seed_file_then_overrides(tmp_path: Path) -> None:
    table = PriceTable.load()
    assert table.cost("deepseek-v3.2", 1_000_000, 1_000_000) == pytest.approx(0.84)
    assert table.cost("openai/gpt-4.1", 500_000, 0) == pytest.approx(4.0)
    assert table.cost("claude-sonnet-4.5", 0, 1_000_000) == pytest.approx(15.0)
    assert table.cost("gemini-2.5-flash", 1_000_000, 0) == pytest.approx(2.5)
    assert table.cost("who-knows", 10, 10) is None
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"gpt-4.1": {"prompt": 2, "completion": 8}, "local": [0, 0]}))
    table = PriceTable.load(path, {"local": [1, 1]})
    assert table.cost("gpt-4.1", 1_000_000, 1_000_000) == pytest.approx(10.0)
    assert table.cost("local", 1_000_000, 0) == pytest.approx(1.0)
    path.write_text('{"bad": "x"}')
    with pytest.raises(ConfigError):
        PriceTable.load(path)


def test_gpt4o_snapshots_reproduce_the_first_designs_comparison() -> None:
    # The first design: "DeepSeek V3.2 at $0.42/MTok compared to GPT-4o's $15/MTok" (the first snapshot's output price)
    table = PriceTable.load()
    assert table.cost("gpt-4o-2024-05-13", 1_000_000, 0) == pytest.approx(5.0)
    assert table.cost("gpt-4o-2024-05-13", 0, 1_000_000) == pytest.approx(15.0)
    for later in ("gpt-4o-2024-08-06", "gpt-4o-2024-11-20", "openai/gpt-4o"):
        assert table.cost(later, 1_000_000, 1_000_000) == pytest.approx(2.5 + 10.0)
    assert table.cost("deepseek-v3.2", 0, 1_000_000) / table.cost("gpt-4o-2024-05-13", 0, 1_000_000) == pytest.approx(0.42 / 15)  # type: ignore[operator]
    assert table.cost("gpt-4o-2099-01-01", 10, 10) is None  # an unknown snapshot is not guessed


def test_retry_after_forms() -> None:
    assert parse_retry_after("3", cap_s=20) == 3.0
    assert parse_retry_after("0.5", cap_s=20) == 0.5
    assert parse_retry_after(None, cap_s=20) is None and parse_retry_after("soon", cap_s=20) is None
    assert parse_retry_after("inf", cap_s=20) is None and parse_retry_after("1e400", cap_s=20) is None
    assert parse_retry_after("1e9", cap_s=20) == 20 and parse_retry_after("-5", cap_s=20) == 0
    now = time.time()
    assert parse_retry_after(email.utils.formatdate(now + 10, usegmt=True), cap_s=20, now_s=now) == pytest.approx(10, abs=1)


def test_endpoints_accept_a_base_with_or_without_v1() -> None:
    assert endpoint("https://api.openai.com/v1", "openai") == "https://api.openai.com/v1/chat/completions"
    assert endpoint("http://127.0.0.1:8100", "openai") == "http://127.0.0.1:8100/v1/chat/completions"
    assert endpoint("https://api.anthropic.com", "anthropic") == "https://api.anthropic.com/v1/messages"


def test_an_endpoint_keeps_the_base_urls_query_after_the_path() -> None:
    base = "https://x.example/openai/deployments/gpt4?api-version=2024-06-01&sig=a%2Bb"
    assert endpoint(base, "openai") == "https://x.example/openai/deployments/gpt4/v1/chat/completions?api-version=2024-06-01&sig=a%2Bb"
    assert endpoint("https://x.example/v1/?v=1#frag", "anthropic") == "https://x.example/v1/messages?v=1"


async def test_a_401_echoing_the_key_is_redacted_and_not_retried() -> None:
    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        writer.write(response(401, orjson.dumps({"error": {"message": f"Incorrect API key provided: {SECRET}"}})))
        await writer.drain()
        return True

    peer = await HostilePeer(answer).start()
    client = LLMClient(LLMSettings(base_url=peer.url + "/v1", api_keys=[SECRET]))  # type: ignore[list-item]
    try:
        with pytest.raises(LLMRequestError) as caught:
            await client.chat([{"role": "user", "content": "hi"}])
    finally:
        await client.aclose()
        await peer.stop()
    assert caught.value.status == 401 and peer.requests == 1
    assert SECRET not in str(caught.value) and "key#1" in str(caught.value)
    assert f"authorization: Bearer {SECRET}".encode() in peer.heads[0]


async def test_a_long_agent_error_quoting_the_key_is_cut_once_with_its_true_count() -> None:
    # Given an LLM key, and an agent whose long error quotes it where the worker keeps the text
    from agents.llm import configure
    from agents.registry import AgentContext, AgentRegistry
    from agents.runner import run_agent
    from streams.errors import AgentFailed
    from streams.sizes import MAX_ERROR_CHARS, bounded_error

    configure(LLMSettings(api_keys=SECRET))  # type: ignore[arg-type]
    registry = AgentRegistry()

    def boom(data: dict[str, object]) -> None:
        raise ValueError("x" * 3000 + SECRET + "y" * 7000)

    registry.add(boom, name="boom")
    # When it fails
    with pytest.raises(AgentFailed) as caught:
        await run_agent(registry.get("boom"), {}, AgentContext(job_id="j", agent="boom", attempt=1, max_attempts=1))
    # Then the text the worker keeps names the error and the key's label, not the key, and says how much was cut
    kept = bounded_error(str(caught.value))
    assert kept.startswith("ValueError: xxx") and "key#1" in kept and SECRET[:8] not in kept, kept[3000:3100]
    assert kept == str(caught.value) and kept.endswith(f"... ({len('ValueError: ') + 3000 + len('key#1') + 7000 - MAX_ERROR_CHARS} characters cut)")


WIDE = json.dumps({"items": [{"n": i} for i in range(300)]})  # 301 brackets, 3 levels: handed on as it came


@pytest.mark.parametrize(("arguments", "handed_on"), [
    (WIDE, WIDE),
    ('{"a":' * 300 + "1" + "}" * 300, "(tool-call arguments not read: nested over 254 levels deep)"),
    ('{"a":' * 2000 + "1" + "}" * 2000, "(tool-call arguments not read: depth limit exceeded: line 1 column 5122 (char 5121))"),
    ({"a": json.loads('{"a":' * 300 + "1" + "}" * 300)}, "(tool-call arguments not read: nested over 254 levels deep)"),
    ('{"plan": "walk', '{"plan": "walk'),
], ids=["wide", "300-deep", "2000-deep", "object-300-deep", "cut-short"])
def test_tool_arguments_are_handed_on_as_they_came_unless_too_deep_to_read(arguments: object, handed_on: str) -> None:
    from agents.llm.providers import parse_openai

    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    reply = parse_openai({"choices": [{"message": {"role": "assistant", "tool_calls": [call]}}]})
    assert reply.tool_calls[0]["function"]["arguments"] == handed_on


def test_an_anthropic_tool_call_whose_input_was_not_read_is_sent_back_as_an_empty_input() -> None:
    # Given a tool_use input nested 300 deep, handed on as the note that it was not read (CrewAI reports that to the model)
    from agents.llm.providers import anthropic_body, parse_anthropic

    deep = json.loads('{"a":' * 300 + "1" + "}" * 300)
    (call,) = parse_anthropic({"content": [{"type": "tool_use", "id": "t1", "name": "f", "input": deep}]}).tool_calls
    assert call["function"]["arguments"].startswith("(tool-call arguments not read")
    # When the next request carries that call back (before: json.loads of the note raised, failing the step)
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "t1", "content": "Error: Failed to parse tool arguments as JSON"}]
    body = anthropic_body("m", messages, None, 64, None, None)
    # Then it goes as a tool_use with an empty input, the tool's result beside it
    assert body["messages"][1]["content"] == [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]


def test_free_text_keeps_a_short_placeholder_key_and_cleans_a_real_one() -> None:
    from agents.llm.redact import configured
    from agents.llm.settings import LLMSettings

    # Given an agent's error naming a host that is also the (placeholder) key, and one quoting a real key
    placeholder = configured(LLMSettings(base_url="http://ollama:11434/v1", api_keys=["ollama"]))
    real = configured(LLMSettings(base_url="http://127.0.0.1:9/v1", api_keys=["sk-live-0123456789abcdef"]))
    # Then the placeholder is no secret: the text stays as it was (before: "upstream key#1:11434 refused")
    assert placeholder("upstream ollama:11434 refused; max tokens exceeded") == "upstream ollama:11434 refused; max tokens exceeded"
    # And a real key is replaced by its label, a run of 8 of its characters masked
    assert real("sent sk-live-0123456789abcdef and sk-live-0123") == "sent key#1 and [redacted]"
