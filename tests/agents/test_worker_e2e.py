"""LLM agents end to end: a real ``streamcrew worker`` process against ``streamcrew mock-llm`` (issue 3).

Every test runs the worker as its own process (the ``workers`` fixture) and
talks to it only through Redis, its ``/metrics`` and its log file, as a user
would. mock-llm runs as ``streamcrew mock-llm`` in its own process, except in
the rotation test, where it runs in a thread of the test process so the test
can read which key fingerprint each request came with.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from consumers.mock_llm import MockOptions, running_mock_llm
from consumers.processes import Child, streamcrew_cmd
from streams.embedded import free_port
from streams.envelope import JobRequest
from streams.keys import Keys
from tests.squatter import SQUATTER_BODY
from tests.support import PORT_ATTEMPTS, WorkerFactory, results, start_on_drawn_port, wait_results, wait_serving, wait_until

MODEL = "deepseek-v3.2"
PRICE_PER_M = (0.42, 0.42)  # USD per million prompt / completion tokens (the seed price table)
# The mock answers a first call with a tool call and the next with text quoting the tool's result,
# so a specialist crew makes two calls, ``support`` one more to route, ``ask`` one.
CALLS = {"ask": 1, "order": 2, "returns": 2, "product": 2, "support": 3}

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _secret(name: str) -> str:
    return f"sk-e2e-{name}-{uuid.uuid4().hex}"


def _fingerprint(secret: str) -> str:
    """What mock-llm records for a key (it never keeps the key itself)."""
    return "key-" + hashlib.sha256(secret.encode()).hexdigest()[:8]


def _cost(usage: dict[str, Any]) -> float:
    return (usage["prompt_tokens"] * PRICE_PER_M[0] + usage["completion_tokens"] * PRICE_PER_M[1]) / 1_000_000


def _labels(**labels: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


async def _scrape(port: int) -> Samples:
    async with httpx.AsyncClient() as client:
        text = (await client.get(f"http://127.0.0.1:{port}/metrics", timeout=5)).text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in text_string_to_metric_families(text) for s in f.samples}


def _llm(samples: Samples, name: str) -> Samples:
    return {key: value for key, value in samples.items() if key[0] == name}


def _assert_no_secret_in(child: Child, *secrets: str) -> None:
    log = child.log_text()
    assert log, "the worker wrote no log"
    for secret in secrets:
        assert secret not in log, "an API key appears in the worker's log"


class MockProcess:
    """``streamcrew mock-llm`` on a fixed free port, restartable with other options."""

    def __init__(self, log_dir: Path) -> None:
        self.port = free_port()
        self.log_dir = log_dir
        self.child: Child | None = None
        self.starts = 0
        self.bound_once = False  # from then on the port is fixed: workers point at it

    @property
    def openai_base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def start(self, *args: str) -> None:
        """Start it; on its first start another port is drawn when another process took this one first (see
        :func:`tests.support.start_on_drawn_port`); after that the port is fixed: workers point at it."""
        def start(port: int) -> Child:
            self.starts += 1
            self.port = port
            return Child(streamcrew_cmd("mock-llm", "--port", str(port), *args), log_path=self.log_dir / f"mock-llm-{self.starts}.log")

        ports = iter([self.port])
        self.child, _ = start_on_drawn_port(
            # it says where it listens (once it holds the port), as the value the workers' setting takes
            start, lambda port: f"STREAMCREW_LLM_BASE_URL=http://127.0.0.1:{port}/v1", what="mock-llm", timeout=20,
            draw=lambda: next(ports, None) or free_port(), attempts=1 if self.bound_once else PORT_ATTEMPTS)
        self.bound_once = True
        await wait_serving(self.child, f"http://127.0.0.1:{self.port}/healthz", timeout=20, what="mock-llm to answer /healthz")

    def stop(self) -> None:
        if self.child is not None:
            self.child.stop(10)
            self.child = None


@pytest.fixture
def mock_process(tmp_path: Path) -> Iterator[MockProcess]:
    mock = MockProcess(tmp_path)
    yield mock
    mock.stop()


# (job id, agent, lane, input, facts the answer must quote from the catalogue's tools)
JOBS: list[tuple[str, str, str, dict[str, Any], tuple[str, ...]]] = [
    ("e2e-order", "order", "high", {"order_id": "ORD-12345", "question": "Where is my package?"}, ("FedEx", "771234567890", "shipped")),
    ("e2e-returns", "returns", "normal", {"order_id": "ORD-12346", "reason": "too small"}, ('"approved":true', "RMA-")),
    ("e2e-product", "product", "low", {"question": "Is the hiking backpack in stock?", "sku": "SKU-1002"},
     ("Summit 30L hiking backpack", '"in_stock":false')),
    ("e2e-support", "support", "normal", {"query": "Where is my parcel for order ORD-12346?", "customer_id": "CUS-002"},
     ("DHL", "JD014600006281234567", "delivered")),
    ("e2e-ask", "ask", "low", {"prompt": "Say hello to the night shift"}, ("Say hello to the night shift",)),
]


async def test_every_llm_agent_completes_through_a_real_worker_with_usage_cost_and_metrics(
    redis, keys: Keys, producer, workers: WorkerFactory, mock_process: MockProcess
) -> None:
    # Given streamcrew mock-llm in its own process and a worker pointed at it with two keys
    await mock_process.start()
    k1, k2 = _secret("one"), _secret("two")
    worker, metrics_port = workers.start_serving_metrics("--concurrency", "50", "--llm-base-url", mock_process.openai_base_url,
                                                         "--llm-api-keys", f"{k1},{k2}", all_agents=True)

    # When each LLM agent gets a request, on different lanes
    for job_id, agent, lane, data, _ in JOBS:
        await producer.publish(agent, data, id=job_id, priority=lane)
    events = {r.id: r for r in await wait_results(redis, keys, len(JOBS), timeout=40)}

    # Then each one completed with the crew's (or the model's) answer, quoting what its tool found
    assert sorted(events) == sorted(j[0] for j in JOBS)
    for job_id, agent, _, _, facts in JOBS:
        event = events[job_id]
        assert event.status == "completed" and event.agent == agent and event.attempts == 1, event
        answer = event.result["answer"]
        for fact in facts:
            assert fact in answer, f"{agent}: {fact!r} not in {answer!r}"
        # And usage names the real model, counts tokens and prices them from the table, not offline
        usage = event.usage
        assert usage is not None and usage["model"] == MODEL, event
        assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
        assert "offline" not in usage
        assert usage["cost_usd"] == pytest.approx(_cost(usage), abs=1e-8)
        record = await redis.hgetall(keys.job(job_id))
        assert record["status"] == "completed"
    assert events["e2e-support"].result["routed_to"] == "order"
    assert events["e2e-ask"].result["model"] == MODEL

    # And /metrics agrees with the results' usage, summed
    prompt = sum(e.usage["prompt_tokens"] for e in events.values())
    completion = sum(e.usage["completion_tokens"] for e in events.values())
    cost = sum(e.usage["cost_usd"] for e in events.values())
    tokens_key = ("streamcrew_llm_tokens_total", _labels(kind="completion", model=MODEL))

    async def settled() -> bool:
        return (await _scrape(metrics_port)).get(tokens_key) == completion

    await wait_until(settled, timeout=10, what="the worker's LLM token counters to settle")
    m = await _scrape(metrics_port)
    assert _llm(m, "streamcrew_llm_tokens_total") == {
        ("streamcrew_llm_tokens_total", _labels(kind="prompt", model=MODEL)): prompt,
        ("streamcrew_llm_tokens_total", _labels(kind="completion", model=MODEL)): completion,
    }
    assert _llm(m, "streamcrew_llm_requests_total") == {
        ("streamcrew_llm_requests_total", _labels(model=MODEL, status="200")): sum(CALLS[j[1]] for j in JOBS),
    }
    assert _llm(m, "streamcrew_llm_cost_usd_total") == {
        ("streamcrew_llm_cost_usd_total", _labels(model=MODEL)): pytest.approx(cost, abs=1e-8 * len(JOBS)),
    }
    assert m[("streamcrew_llm_latency_seconds_count", _labels(model=MODEL))] == sum(CALLS[j[1]] for j in JOBS)
    # And neither key reached the log
    _assert_no_secret_in(worker, k1, k2)


async def test_429s_rotate_keys_and_every_job_still_completes(redis, keys: Keys, producer, workers: WorkerFactory) -> None:
    # Given a mock that allows 4 requests per second per key, and a worker with two keys (from the environment)
    k1, k2 = _secret("one"), _secret("two")
    async with running_mock_llm(MockOptions(key_rps=4.0)) as mock:
        assert mock.app is not None
        worker, metrics_port = workers.start_serving_metrics("--concurrency", "50", "--llm-base-url", mock.openai_base_url,
                                                             "--log-level", "debug", env={"STREAMCREW_LLM_API_KEYS": f"{k1},{k2}"})
        # When 24 ask jobs arrive at once, three times what both keys allow in a second
        n = 24
        await producer.publish_many([JobRequest(agent="ask", data={"prompt": f"question {i}"}, id=f"rot-{i}") for i in range(n)])
        events = await wait_results(redis, keys, n, timeout=30)
        served = list(mock.app.served)

    # Then every job completed on its first attempt: the client rode out the 429s
    assert [(e.status, e.attempts) for e in events] == [("completed", 1)] * n
    assert all(e.usage and e.usage["model"] == MODEL and e.usage["cost_usd"] > 0 for e in events)
    # And both keys were rate-limited and both served answers: the client rotated between them
    by_key = {(s.key, s.status) for s in served}
    assert {(_fingerprint(k1), 200), (_fingerprint(k2), 200), (_fingerprint(k1), 429), (_fingerprint(k2), 429)} <= by_key
    assert {s.key for s in served} == {_fingerprint(k1), _fingerprint(k2)}
    # And the worker counted the same 429s and 200s the mock answered
    m = await _scrape(metrics_port)
    assert m[("streamcrew_llm_requests_total", _labels(model=MODEL, status="200"))] == n
    assert m[("streamcrew_llm_requests_total", _labels(model=MODEL, status="429"))] == sum(s.status == 429 for s in served)
    assert m[("streamcrew_llm_tokens_total", _labels(kind="prompt", model=MODEL))] == sum(e.usage["prompt_tokens"] for e in events)
    # And no key in the log, even at debug level
    _assert_no_secret_in(worker, k1, k2)


async def test_when_every_key_is_rate_limited_jobs_are_retried_not_lost(
    redis, keys: Keys, producer, workers: WorkerFactory, mock_process: MockProcess
) -> None:
    # Given a mock that answers every request 429, and a worker whose LLM calls give up after 3 tries
    await mock_process.start("--rate-limit", "1.0", "--retry-after", "0.2")
    k1, k2 = _secret("one"), _secret("two")
    worker, metrics_port = workers.start_serving_metrics("--concurrency", "10", "--llm-base-url", mock_process.openai_base_url,
                                                         "--llm-api-keys", f"{k1},{k2}", "--log-level", "debug",
                                                         env={"STREAMCREW_LLM_MAX_RETRIES": "2"})

    # When a job with a budget of 2 attempts and one with 30 arrive
    await producer.publish("ask", {"prompt": "short budget"}, id="hard-2", max_attempts=2)
    await producer.publish("ask", {"prompt": "long budget"}, id="hard-30", max_attempts=30)

    # Then the short one is retried, fails once its attempts are spent, and is dead-lettered, not dropped
    (short,) = await wait_results(redis, keys, 1, timeout=20)
    assert (short.id, short.status, short.attempts) == ("hard-2", "failed", 2)
    assert "LLMUnavailable" in short.error and "429" in short.error
    dead = [f for _, f in await redis.xrange(keys.dead)]
    assert [(f["id"], f["reason"], f["attempts"]) for f in dead] == [("hard-2", "exhausted", "2")]

    # When the long one has failed at least once more, and the limit then lifts (mock restarted without it)
    async def long_retried() -> bool:
        return int(await redis.hget(keys.job("hard-30"), "attempts") or 0) >= 2

    await wait_until(long_retried, timeout=15, what="the long-budget job to be retried")
    mock_process.stop()
    await mock_process.start()

    # Then that job completes on a later attempt, with usage for the call that got through
    events = {e.id: e for e in await wait_results(redis, keys, 2, timeout=30)}
    done = events["hard-30"]
    assert done.status == "completed" and done.attempts > 1, done
    assert done.usage and done.usage["model"] == MODEL and done.usage["prompt_tokens"] > 0
    m = await _scrape(metrics_port)
    assert m[("streamcrew_retries_total", _labels(agent="ask"))] == 1 + (done.attempts - 1)
    assert m[("streamcrew_llm_requests_total", _labels(model=MODEL, status="429"))] >= 3 * (2 + 1)
    assert m[("streamcrew_llm_requests_total", _labels(model=MODEL, status="200"))] == 1
    # And the error texts and the log name keys by label only
    assert k1 not in short.error and k2 not in short.error
    _assert_no_secret_in(worker, k1, k2)


async def test_requests_without_an_id_on_two_lanes_in_the_same_millisecond_each_get_a_result(
    redis, keys: Keys, workers: WorkerFactory
) -> None:
    # Given a worker (offline model: the LLM does not matter here)
    worker = workers.start("--concurrency", "10")
    # When two id-less requests land on two lanes with the same entry ID, as XADD * gives within one millisecond
    await redis.xadd(keys.lane("high"), {"agent": "ask", "data": '{"prompt": "one"}'}, id="1700000000000-0")
    await redis.xadd(keys.lane("normal"), {"agent": "ask", "data": '{"prompt": "two"}'}, id="1700000000000-0")

    async def both_handled() -> bool:
        return int(await redis.xlen(keys.results)) >= 2 or "outcome=duplicate" in worker.log_text()

    await wait_until(both_handled, timeout=20, what="both requests to be handled")
    # Then each request yields its own result (contract §3 invariant)
    assert len(await results(redis, keys)) == 2, worker.log_text()[-2000:]



async def test_an_unreachable_llm_endpoint_is_named_in_the_job_error_without_credentials(
    redis, keys: Keys, producer, workers: WorkerFactory, refusing_port: int,  # type: ignore[no-untyped-def]
) -> None:
    # Given a worker whose LLM endpoint (with credentials in its URL) has nothing listening
    port, key = refusing_port, _secret("down")
    worker = workers.start("--concurrency", "5", "--llm-base-url", f"http://ops:hunter2@127.0.0.1:{port}/v1",
                           "--llm-api-keys", key, env={"STREAMCREW_LLM_MAX_RETRIES": "1", "STREAMCREW_LLM_BACKOFF_S": "0.01"})
    # When an ask job with one attempt runs
    await producer.publish("ask", {"prompt": "anyone there?"}, id="down-1", max_attempts=1)
    (event,) = await wait_results(redis, keys, 1, timeout=20)
    # Then its error names the endpoint, and neither the key nor the URL's credentials appear anywhere
    assert event.status == "failed" and f"127.0.0.1:{port}" in (event.error or ""), event.error
    for secret in (key, "hunter2"):
        assert secret not in (event.error or "")
    _assert_no_secret_in(worker, key, "hunter2")


async def test_a_mock_llm_port_taken_before_it_binds_it_is_given_up(tmp_path: Path, squatter: int) -> None:
    # Given a mock-llm process whose drawn port another server holds (and answers /healthz on)
    mock = MockProcess(tmp_path)
    mock.port = squatter
    try:
        # When the test starts it
        await mock.start()
        # Then it serves on another port, and it is the mock that answers there
        assert mock.port != squatter
        assert "address already in use" in (tmp_path / "mock-llm-1.log").read_text().lower()
        async with httpx.AsyncClient() as client:
            assert (await client.get(f"http://127.0.0.1:{mock.port}/healthz")).content != SQUATTER_BODY
    finally:
        mock.stop()
