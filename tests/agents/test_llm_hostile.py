"""Hostile LLM endpoints on loopback against the real LLMClient (issue 10 defects 3 and 8, issue 15)."""

from __future__ import annotations

import asyncio
import logging
import time

import orjson
import pytest

from agents.llm import LLMClient, LLMSettings, LLMUnavailable
from streams.embedded import free_port
from tests.hostile import Start, response, started_peers

SECRET = "sk-hostile-0123456789abcdef"
HELLO = [{"role": "user", "content": "hi"}]
def completion(text: str) -> bytes:
    return orjson.dumps({"choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                         "usage": {"prompt_tokens": 1, "completion_tokens": 1}})


def ok(text: str) -> bytes:
    return response(200, completion(text), headers="content-type: application/json\r\n")


peer = pytest.fixture(started_peers, name="peer")


def client_for(url: str, **overrides: object) -> LLMClient:
    values: dict[str, object] = {"base_url": url + "/v1", "api_keys": SECRET, "model": "hostile-model",
                                 "backoff_s": 0.01, "max_backoff_s": 0.3, "timeout_s": 3.0, "retry_budget_s": 5.0}
    values.update(overrides)
    return LLMClient(LLMSettings(**values))  # type: ignore[arg-type]


async def test_an_early_hints_response_never_shifts_answers_between_calls(peer: Start) -> None:
    # Given an endpoint that sends "103 Early Hints" before the first call's real answer
    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        hints = b"HTTP/1.1 103 Early Hints\r\nlink: </style.css>; rel=preload\r\n\r\n" if n == 1 else b""
        writer.write(hints + ok(f"answer-{n}"))
        await writer.drain()
        return True

    p = await peer(answer)
    client = client_for(p.url)
    try:
        # When three calls are made one after the other
        results = [await client.chat(HELLO) for _ in range(3)]
    finally:
        await client.aclose()
    # Then each call gets its own answer
    assert [r.content for r in results] == ["answer-1", "answer-2", "answer-3"]


@pytest.mark.parametrize("retry_after", ["inf", "1e400", "1e9", "-5", "garbage", "nan"])
async def test_a_hostile_retry_after_never_benches_the_key_beyond_the_cap(peer: Start, retry_after: str) -> None:
    # Given one key, and an endpoint whose first answer is a 429 with a hostile Retry-After
    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        writer.write(response(429, b"{}", headers=f"retry-after: {retry_after}\r\n") if n == 1 else ok("fine"))
        await writer.drain()
        return True

    p = await peer(answer)
    client = client_for(p.url)
    started = time.monotonic()
    try:
        # When a call is made
        result = await client.chat(HELLO)
    finally:
        await client.aclose()
    # Then the key came back within the cap (max_backoff_s) and the call succeeded
    assert result.content == "fine"
    assert time.monotonic() - started < 3.0


async def test_an_unreachable_endpoint_is_named_in_the_error_without_credentials(caplog: pytest.LogCaptureFixture) -> None:
    # Given an endpoint URL with credentials, where nothing listens
    port = free_port()
    client = client_for(f"http://alice:hunter2@127.0.0.1:{port}", max_retries=1)
    caplog.set_level(logging.DEBUG)
    try:
        # When a call is made
        with pytest.raises(LLMUnavailable) as caught:
            await client.chat(HELLO)
    finally:
        await client.aclose()
    # Then the error names the endpoint (host and port), and no secret is in it or in any log line
    message = str(caught.value)
    assert f"127.0.0.1:{port}" in message, message
    for secret in ("hunter2", "alice", SECRET):
        assert secret not in message
        assert secret not in caplog.text
