"""An agent's error text is data (the result's ``error``, the dead letter, the webhook body, the worker's log),
so URLs in it lose their credentials and query: httpx and aiohttp quote the URL a failed call asked for.

Real Redis, a real worker process, a real HTTP peer on loopback answering 401.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from streams.keys import Keys
from streams.producer import Producer
from tests.hostile import Start, response, started_peers
from tests.support import WorkerFactory, wait_results

APP = "tests.agents.upstream_app"
PASSWORD, QUERY_KEY = "pw-Xq81LmZ", "qk-77RrTt3"
peer = pytest.fixture(started_peers, name="peer")


@pytest.mark.parametrize("client", ["httpx", "aiohttp"])
async def test_an_upstream_error_reaches_no_result_dead_letter_or_log_with_the_urls_secrets(
    client: str, redis: Any, keys: Keys, producer: Producer, workers: WorkerFactory, peer: Start,
) -> None:
    # Given an agent whose upstream (credentials and ?api_key= in its URL) refuses every call
    async def refuse(writer: Any, _: int) -> bool:
        writer.write(response(401, b'{"error": "no"}', reason="Unauthorized"))
        return False

    upstream = await peer(refuse)
    url = upstream.url.replace("http://", f"http://agent:{PASSWORD}@") + f"/v1/items?api_key={QUERY_KEY}&page=2"
    worker = workers.start("--app", APP, env={"UPSTREAM_URL": url})
    # When a job of it fails both its attempts
    await producer.publish("upstream_call", {"client": client}, id=f"upstream-{client}", max_attempts=2)
    (result,) = await wait_results(redis, keys, 1, timeout=30)
    # Then the error still says what failed and where, but none of the URL's secrets
    assert result.status == "failed" and "401" in (result.error or "") and "127.0.0.1" in (result.error or ""), result.error
    (_, letter), = await redis.xrange(keys.dead)
    worker.terminate()
    worker.wait(timeout=30)
    for where, text in (("result", result.error or ""), ("dead letter", letter["error"]), ("worker log", worker.log_text())):
        assert PASSWORD not in text and QUERY_KEY not in text, f"{where}: {text[-3000:]}"


LLM_KEY = "sk-live-ABCDEFGHIJKLMNOP0123456789"


def key_runs_in(text: str) -> list[str]:
    """The runs of 8 characters of ``LLM_KEY`` in ``text`` (docs/llm.md: none reaches an error or a log)."""
    return [LLM_KEY[i:i + 8] for i in range(len(LLM_KEY) - 7) if LLM_KEY[i:i + 8] in text]


@pytest.mark.parametrize(("agent", "status"), [("leaky", "failed"), ("leaky_reject", "rejected")])
async def test_an_agent_error_quoting_the_llm_key_reaches_no_result_dead_letter_or_log_with_it(
    agent: str, status: str, redis: Any, keys: Keys, producer: Producer, workers: WorkerFactory,
) -> None:
    # Given an agent whose failure quotes the configured LLM key, cut short and whole
    worker = workers.start("--app", "tests.agents.leaky_app", "--agents", agent, env={"STREAMCREW_LLM_API_KEYS": LLM_KEY})
    # When its job fails (or is rejected)
    await producer.publish(agent, {}, id=f"{agent}-1", max_attempts=1)
    (result,) = await wait_results(redis, keys, 1, timeout=30)
    (_, letter), = await redis.xrange(keys.dead)
    worker.terminate()
    worker.wait(timeout=30)
    # Then the error still says what failed, the key as its label, and no 8 characters of the key anywhere
    assert result.status == status and "validation error for TaskOutput" in (result.error or ""), result.error
    assert "key#1 again" in (result.error or ""), result.error
    for where, text in (("result", result.error or ""), ("dead letter", letter["error"]), ("worker log", worker.log_text())):
        assert not key_runs_in(text), f"{where}: {text[-3000:]}"


async def test_a_crew_whose_model_echoes_the_key_in_a_tool_call_leaks_it_nowhere(
    redis: Any, keys: Keys, producer: Producer, workers: WorkerFactory, peer: Start,
) -> None:
    # Given an endpoint that answers each request with a tool call whose id and name repeat the request's key
    async def echo_key(writer: Any, n: int) -> bool:
        head = endpoint.heads[-1].decode("latin-1")
        key = next(line.split(" ", 2)[2] for line in head.split("\r\n") if line.lower().startswith("authorization:"))
        call = {"id": f"id-{key}", "type": "function", "function": {"name": key, "arguments": "{}"}}
        body = {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [call]}, "finish_reason": "tool_calls"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1}}
        writer.write(response(200, orjson.dumps(body), headers="content-type: application/json\r\n"))
        return True

    endpoint = await peer(echo_key)
    worker = workers.start("--agents", "order", "--llm-base-url", endpoint.url + "/v1", env={
        "STREAMCREW_LLM_API_KEYS": LLM_KEY, "STREAMCREW_LLM_MAX_RETRIES": "0", "STREAMCREW_LLM_BACKOFF_S": "0.01"})
    # When an order crew's job runs against it, once
    await producer.publish("order", {"order_id": "ORD-12345", "question": "Where is it?"}, id="order-echo", max_attempts=1)
    (result,) = await wait_results(redis, keys, 1, timeout=60)
    (_, letter), = await redis.xrange(keys.dead)
    worker.terminate()
    worker.wait(timeout=30)
    # Then it failed, and no 8 characters of the key are in its error, its dead letter or the worker's log
    assert result.status == "failed", result
    for where, text in (("result", result.error or ""), ("dead letter", letter["error"]), ("worker log", worker.log_text())):
        assert not key_runs_in(text), f"{where}: {text[-3000:]}"
