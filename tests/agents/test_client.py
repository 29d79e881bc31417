"""LLMClient over real HTTP to mock-llm on 127.0.0.1 (issue 3, acceptance 1)."""

from __future__ import annotations

import hashlib
import logging
import time
import uuid

import pytest
from prometheus_client import REGISTRY

from agents.llm import LLMClient, LLMSettings, LLMUnavailable
from agents.usage import UsageLedger
from consumers.mock_llm import MockOptions, RunningMock
from streams.errors import AgentControl, StreamcrewError

KEYS = ["sk-test-alpha-0123456789", "sk-test-bravo-9876543210"]
HELLO = [{"role": "user", "content": "hello there"}]


def fingerprint(secret: str) -> str:
    return "key-" + hashlib.sha256(secret.encode()).hexdigest()[:8]


def settings_for(mock: RunningMock, **overrides: object) -> LLMSettings:
    model = f"test-model-{uuid.uuid4().hex[:8]}"  # its own metric labels per test
    values: dict[str, object] = {"base_url": mock.openai_base_url, "api_keys": ",".join(KEYS), "model": model,
                                 "prices": {model: [2.0, 4.0]}, "backoff_s": 0.01, "timeout_s": 5.0}
    values.update(overrides)
    return LLMSettings(**values)  # type: ignore[arg-type]


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_tokens_and_cost_are_summed_into_the_ledger_and_metrics(mock_llm: RunningMock, ledger: UsageLedger) -> None:
    # Given a client for a model priced 2 / 4 USD per million tokens
    client = LLMClient(settings_for(mock_llm))
    model = client.model
    # When a job makes three calls
    results = [await client.chat([{"role": "user", "content": "question number " + "x" * n}]) for n in (1, 40, 400)]
    await client.aclose()
    # Then usage is the sum of the three, priced from the table
    prompt, completion = sum(r.prompt_tokens for r in results), sum(r.completion_tokens for r in results)
    assert (ledger.prompt_tokens, ledger.completion_tokens, ledger.calls) == (prompt, completion, 3)
    assert ledger.summary() == {"model": model, "prompt_tokens": prompt, "completion_tokens": completion,
                                "cost_usd": round((prompt * 2.0 + completion * 4.0) / 1e6, 8)}
    # And the metrics carry the same figures
    assert metric("streamcrew_llm_requests_total", model=model, status="200") == 3
    assert metric("streamcrew_llm_tokens_total", model=model, kind="prompt") == prompt
    assert metric("streamcrew_llm_tokens_total", model=model, kind="completion") == completion
    assert metric("streamcrew_llm_cost_usd_total", model=model) == pytest.approx((prompt * 2.0 + completion * 4.0) / 1e6)
    assert metric("streamcrew_llm_latency_seconds_count", model=model) == 3


async def test_unknown_model_has_unknown_cost(mock_llm: RunningMock, ledger: UsageLedger) -> None:
    client = LLMClient(settings_for(mock_llm, prices={}))
    await client.chat(HELLO)
    await client.aclose()
    summary = ledger.summary()
    assert summary is not None and summary["cost_usd"] is None and summary["prompt_tokens"] > 0


@pytest.mark.parametrize("mock_options", [MockOptions(key_rps=1.0)])
async def test_429_rotates_keys_and_a_cooling_key_is_not_used_before_its_time(mock_llm: RunningMock, ledger: UsageLedger) -> None:
    # Given two keys that may each make one request per second (429, Retry-After: 1 beyond)
    client = LLMClient(settings_for(mock_llm))
    # When four calls are made back to back
    for _ in range(4):
        result = await client.chat(HELLO)
        assert result.content
    await client.aclose()
    # Then 429s happened, every call completed, and after a key's 429 that key
    # was not used again until its Retry-After had passed
    served = mock_llm.app.served  # type: ignore[union-attr]
    assert any(s.status == 429 for s in served)
    assert sum(s.status == 200 for s in served) == 4
    assert {s.key for s in served} == {fingerprint(k) for k in KEYS}
    for i, hit in enumerate(served):
        if hit.status == 429:
            later = [s for s in served[i + 1:] if s.key == hit.key]
            assert all(s.at - hit.at >= 0.95 for s in later), "a cooling key was reused before Retry-After"
    assert ledger.calls == 4


@pytest.mark.parametrize("mock_options", [MockOptions(rate_limit=1.0, retry_after_s=30)])
async def test_all_keys_limited_means_a_bounded_wait_then_llm_unavailable(
    mock_llm: RunningMock, ledger: UsageLedger, caplog: pytest.LogCaptureFixture
) -> None:
    # Given every request is answered 429 with Retry-After: 30, and a 2 s budget per call
    caplog.set_level(logging.DEBUG)
    client = LLMClient(settings_for(mock_llm, retry_budget_s=2.0))
    started = time.monotonic()
    # When a call is made
    with pytest.raises(LLMUnavailable) as caught:
        await client.chat(HELLO)
    await client.aclose()
    # Then it gives up at once (each key tried once, no busy loop) with an error
    # the worker treats as a failed attempt, naming keys only by label
    assert time.monotonic() - started < 2.0
    assert [s.status for s in mock_llm.app.served] == [429, 429]  # type: ignore[union-attr]
    assert isinstance(caught.value, StreamcrewError) and not isinstance(caught.value, AgentControl)
    message = str(caught.value)
    assert "cooling down" in message and "key#" in message
    assert caught.value.__cause__ is None and caught.value.__context__ is None
    assert ledger.calls == 0
    for secret in KEYS:
        assert secret not in message and secret not in repr(caught.value) and secret not in caplog.text


@pytest.mark.parametrize("mock_options", [MockOptions(rate_limit=1.0, retry_after_s=0.3)])
async def test_all_keys_cooling_within_budget_waits_for_the_earliest(mock_llm: RunningMock) -> None:
    # Given Retry-After 0.3 s on every request and room for four attempts
    client = LLMClient(settings_for(mock_llm, max_retries=3, retry_budget_s=5.0))
    started = time.monotonic()
    with pytest.raises(LLMUnavailable):
        await client.chat(HELLO)
    await client.aclose()
    served = mock_llm.app.served  # type: ignore[union-attr]
    # Then attempts 3 and 4 waited for the keys' cool-down instead of spinning
    assert len(served) == 4
    assert served[2].at - served[0].at >= 0.28 and served[3].at - served[1].at >= 0.28
    assert time.monotonic() - started < 2.0


@pytest.mark.parametrize("mock_options", [MockOptions(error_rate=0.5, seed=7)])
async def test_5xx_are_retried(mock_llm: RunningMock, ledger: UsageLedger) -> None:
    client = LLMClient(settings_for(mock_llm, max_retries=10))
    for _ in range(8):
        await client.chat(HELLO)
    await client.aclose()
    statuses = [s.status for s in mock_llm.app.served]  # type: ignore[union-attr]
    assert statuses.count(200) == 8 and {500, 503} & set(statuses)
    failed = metric("streamcrew_llm_requests_total", model=client.model, status="500") + metric("streamcrew_llm_requests_total", model=client.model, status="503")
    assert failed == len(statuses) - 8
    assert ledger.calls == 8  # failed attempts cost nothing


@pytest.mark.parametrize("mock_options", [MockOptions(jitter_s=0.6, seed=3)])
async def test_timeouts_are_retried(mock_llm: RunningMock, ledger: UsageLedger) -> None:
    # Given answers that take 0-0.6 s and a 0.25 s read timeout
    client = LLMClient(settings_for(mock_llm, timeout_s=0.25, max_retries=20))
    for _ in range(4):
        await client.chat(HELLO)
    await client.aclose()
    assert metric("streamcrew_llm_requests_total", model=client.model, status="timeout") >= 1
    assert metric("streamcrew_llm_requests_total", model=client.model, status="200") == 4
    assert ledger.calls == 4


@pytest.mark.parametrize("mock_options", [MockOptions(latency_s=1.0)])
async def test_timeouts_exhaust_the_retry_budget(mock_llm: RunningMock) -> None:
    client = LLMClient(settings_for(mock_llm, timeout_s=0.1, max_retries=2))
    with pytest.raises(LLMUnavailable, match="3 attempt"):
        await client.chat(HELLO)
    await client.aclose()
    assert metric("streamcrew_llm_requests_total", model=client.model, status="timeout") == 3


async def test_anthropic_messages_api_with_a_tool_round_trip(mock_llm: RunningMock, ledger: UsageLedger) -> None:
    client = LLMClient(settings_for(mock_llm, base_url=mock_llm.url, provider="anthropic"))
    tools = [{"type": "function", "function": {"name": "lookup_order", "description": "order status",
                                               "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}}}}]
    messages: list[dict[str, object]] = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "status of ORD-42?"}]
    first = await client.chat(messages, tools=tools)  # type: ignore[arg-type]
    assert first.tool_calls[0]["function"]["name"] == "lookup_order"
    messages += [{"role": "assistant", "content": None, "tool_calls": first.tool_calls},
                 {"role": "tool", "tool_call_id": first.tool_calls[0]["id"], "content": "shipped"}]
    second = await client.chat(messages, tools=tools)  # type: ignore[arg-type]
    await client.aclose()
    assert second.content and "shipped" in second.content and not second.tool_calls
    assert ledger.calls == 2
    assert all(s.path == "/v1/messages" for s in mock_llm.app.served)  # type: ignore[union-attr]
