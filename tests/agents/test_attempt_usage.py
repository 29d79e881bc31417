"""A job's ``usage`` counts every attempt of its run: a failed attempt's LLM calls were paid for too.

Before, a job retried twice and completed on its third attempt reported one attempt's tokens and cost, and a job
that failed reported none, though Prometheus' ``streamcrew_llm_tokens`` counted them all. Real Redis, real worker
processes; the probe agent (tests/workflows/usage_app.py) records chosen calls through the worker's ledger.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from streams.keys import Keys
from streams.producer import Producer
from tests.support import WorkerFactory, wait_for_log
from tests.workflows.support import start_workers, wait_event

APP = "tests.workflows.usage_app"
FAILING = "tests.agents.attempt_app"
CALLS = [{"model": "model-a", "prompt": 100, "completion": 10, "cost": 0.001},
         {"model": "model-b", "prompt": 1, "completion": 2, "cost": None}]  # each attempt: two calls, one unpriced


@pytest.fixture
def probe_worker(workers: WorkerFactory) -> WorkerFactory:
    workers.env["STREAMCREW_RETRY_BACKOFF_S"] = "0.05"
    start_workers(workers, 1, "--concurrency", "4", "--app", APP, "--app", FAILING)
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


async def test_an_exception_raised_again_never_carries_another_jobs_usage(
    redis: Any, keys: Keys, producer: Producer, probe_worker: WorkerFactory,
) -> None:
    # Given an agent that raises one shared exception instance, and a job of it that made one call
    await producer.publish("breaker", {"call": True}, id="paid", max_attempts=1)
    assert (await wait_event(redis, keys, "paid")).usage is not None
    # When another job (another tenant's, maybe) raises the same instance without any call
    await producer.publish("breaker", {"call": False}, id="free", max_attempts=3)
    event = await wait_event(redis, keys, "free")
    # Then it reports no usage (before: the first job's, once per attempt: 300 prompt tokens)
    assert (event.status, event.usage) == ("failed", None), event.usage


@pytest.mark.parametrize(("stored", "expected"), [
    # negative counts and costs, and fields no ledger writes, are not taken from the record
    ('{"prompt_tokens": -1000000, "cost_usd": -5.0, "model": "free", "note": "anything"}',
     {"model": "free,m", "prompt_tokens": 1, "completion_tokens": 1, "cost_usd": None}),
    # a count past 2**64 made the attempt's result unwritable (orjson): the job failed though its agent answered
    ('{"prompt_tokens": 18446744073709551615, "cost_usd": 0.0, "model": "m"}',
     {"model": "m", "prompt_tokens": 1, "completion_tokens": 1, "cost_usd": 0.0}),
])
async def test_a_records_usage_is_taken_only_within_a_ledgers_bounds(
    redis: Any, keys: Keys, probe_worker: WorkerFactory, stored: str, expected: dict[str, Any],
) -> None:
    # Given a record whose usage field anyone with Redis access wrote, and a job of that id that makes one call
    await redis.hset(keys.job("forged"), mapping={"usage": stored})
    await redis.xadd(keys.lane("normal"), {"agent": "usage_probe", "id": "forged", "max_attempts": "2",
                                            "data": '{"calls": [{"model": "m", "prompt": 1, "completion": 1, "cost": 0.0}]}'})
    # Then it completes with its call counted and nothing of the field beyond a ledger's fields and bounds
    event = await wait_event(redis, keys, "forged")
    assert (event.status, event.usage) == ("completed", expected), (event.error, event.usage)


async def test_an_attempt_handed_back_by_a_drain_counts_its_calls(redis: Any, keys: Keys, producer: Producer, workers: WorkerFactory) -> None:
    # Given a worker whose drain lets a running job go after 0.5 s, running a job that made one call and sleeps 3 s
    first = workers.start("--concurrency", "2", "--grace", "0.5", "--app", FAILING)
    await producer.publish("slow_call", {"prompt": 7, "sleep_s": 3}, id="drained")
    wait_for_log(first, "slow_call: attempt 1 called its model", timeout=30)
    # When it is stopped (SIGTERM: the drain hands the job back) and another worker runs the job to the end
    first.terminate()
    assert first.wait(30) is not None, "the first worker did not stop"
    assert "handed back" in first.log_text(), first.log_text()[-2000:]
    workers.start("--concurrency", "2", "--app", FAILING)
    event = await wait_event(redis, keys, "drained", timeout=60)
    # Then its usage counts both runs' calls, both paid (before: the second's alone, 7)
    assert event.status == "completed" and event.usage is not None and event.usage["prompt_tokens"] == 14, event.usage


async def test_a_retry_rejected_when_claimed_keeps_its_earlier_attempts_usage(
    redis: Any, keys: Keys, probe_worker: WorkerFactory,
) -> None:
    # Given a job retrying with 100 prompt tokens paid, whose agent this worker does not serve (a deploy removed it)
    entry_id = f"{int(time.time() * 1000) + 1000}-0"
    await redis.hset(keys.job("orphan"), mapping={
        "status": "retrying", "attempts": "1", "agent": "gone", "source": f"normal/{entry_id}",
        "usage": '{"model": "m", "prompt_tokens": 100, "completion_tokens": 1, "cost_usd": 0.1}'})
    await redis.xadd(keys.lane("normal"), {"agent": "gone", "id": "orphan", "data": "{}"}, id=entry_id)
    # When the retry is claimed and rejected
    event = await wait_event(redis, keys, "orphan")
    # Then the rejected result carries the usage already paid, as the record does (before: none in the result)
    assert event.status == "rejected" and event.usage is not None and event.usage["prompt_tokens"] == 100, event.usage
