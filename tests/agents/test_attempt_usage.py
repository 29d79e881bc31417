"""A job's ``usage`` counts every attempt of its run: a failed attempt's LLM calls were paid for too.

Before, a job retried twice and completed on its third attempt reported one attempt's tokens and cost, and a job
that failed reported none, though Prometheus' ``streamcrew_llm_tokens`` counted them all. Real Redis, real worker
processes; the probe agent (tests/workflows/usage_app.py) records chosen calls through the worker's ledger.
"""

from __future__ import annotations

from typing import Any

import pytest

from streams.keys import Keys
from streams.producer import Producer
from tests.support import WorkerFactory
from tests.workflows.support import start_workers, wait_event

APP = "tests.workflows.usage_app"
CALLS = [{"model": "model-a", "prompt": 100, "completion": 10, "cost": 0.001},
         {"model": "model-b", "prompt": 1, "completion": 2, "cost": None}]  # each attempt: two calls, one unpriced


@pytest.fixture
def probe_worker(workers: WorkerFactory) -> WorkerFactory:
    workers.env["STREAMCREW_RETRY_BACKOFF_S"] = "0.05"
    start_workers(workers, 1, "--concurrency", "4", "--app", APP)
    return workers


async def test_a_job_that_completes_on_its_third_attempt_reports_all_three_attempts_usage(
    redis: Any, keys: Keys, producer: Producer, probe_worker: WorkerFactory,
) -> None:
    # When a job's first two attempts fail after their calls and the third completes
    await producer.publish("usage_probe", {"calls": CALLS, "fail_first": 2}, id="thrice", max_attempts=3)
    event = await wait_event(redis, keys, "thrice")
    # Then its usage is the three attempts' (one attempt's before), with the rules of one ledger
    assert (event.status, event.attempts) == ("completed", 3), event
    assert event.usage == {"model": "model-a,model-b", "prompt_tokens": 303, "completion_tokens": 36, "cost_usd": None}, event.usage
    assert (await redis.hgetall(keys.job("thrice")))["usage"] == event.to_fields()["usage"]


async def test_a_job_that_fails_every_attempt_reports_their_usage(
    redis: Any, keys: Keys, producer: Producer, probe_worker: WorkerFactory,
) -> None:
    # When every attempt of a job fails after its calls (priced ones only here)
    await producer.publish("usage_probe", {"calls": CALLS[:1], "fail_first": 5}, id="never", max_attempts=2)
    event = await wait_event(redis, keys, "never")
    # Then the failed result carries both attempts' usage (none before)
    assert (event.status, event.attempts) == ("failed", 2), event
    assert event.usage == {"model": "model-a", "prompt_tokens": 200, "completion_tokens": 20, "cost_usd": 0.002}, event.usage


async def test_a_record_not_written_by_a_retry_never_lends_its_usage(
    redis: Any, keys: Keys, producer: Producer, probe_worker: WorkerFactory,
) -> None:
    # Given a record whose usage field holds no usage object (anyone with Redis access may write one)
    await redis.hset(keys.job("odd"), mapping={"usage": "[1, 2]"})
    await redis.xadd(keys.lane("normal"), {"agent": "usage_probe", "id": "odd", "data": '{"calls": []}'})
    # When the job runs and makes no call
    event = await wait_event(redis, keys, "odd")
    # Then it completes without usage: the field was not taken for the earlier attempts'
    assert event.status == "completed" and event.usage is None, event
