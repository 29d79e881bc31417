"""``streamcrew_queue_wait_seconds`` is the wait for a job's first start: observed once per job, not again when a
draining worker handed the job back (its attempt not counted, the next start looked like a first) nor on a retry."""

from __future__ import annotations

import asyncio
from typing import Any

from prometheus_client import REGISTRY
from redis.asyncio import Redis

from streams.config import StreamSettings
from streams.envelope import JobRequest
from streams.jobs import JobProcessor
from streams.keys import Keys, lanes_in_priority
from streams.producer import Producer
from streams.runtime import GroupRuntime
from tests.streams.test_resent_calls import Echo
from tests.support import serving, wait_results, wait_until


class Noted(Echo):
    """Notes each run as (worker, job, attempt); ``flaky`` fails its first attempt; every run waits for the gate."""

    def __init__(self, worker: str, runs: list[tuple[str, str, int]], gate: asyncio.Event) -> None:
        self.worker, self.runs, self.gate = worker, runs, gate

    async def execute(self, request: JobRequest, job_id: str, attempt: int, max_attempts: int) -> tuple[Any, dict[str, Any] | None]:
        self.runs.append((self.worker, job_id, attempt))
        await self.gate.wait()
        if job_id == "flaky" and attempt == 1:
            raise RuntimeError("first attempt fails")
        return {"by": self.worker}, None


def _waits_observed(agent: str) -> float:
    return REGISTRY.get_sample_value("streamcrew_queue_wait_seconds_count", {"agent": agent, "lane": "normal"}) or 0.0


async def test_queue_wait_is_observed_once_per_job_across_a_hand_back_and_a_retry(
    redis: Redis, keys: Keys, settings: StreamSettings, prefix: str,
) -> None:
    agent = f"wait-{prefix}"  # a label of this test's own in the process's registry
    runs: list[tuple[str, str, int]] = []
    # Given worker w1 running a job that waits for a gate
    rt1 = GroupRuntime(redis, streams=keys.lanes, group="workers", consumer="w1", concurrency=2, lease_s=60, block_ms=100)
    p1 = JobProcessor(redis, keys, settings, rt1, Noted("w1", runs, asyncio.Event()))
    writer1 = asyncio.create_task(p1.settler.run())
    reader1 = asyncio.create_task(rt1.run())
    await Producer(redis, keys).publish(agent, {}, id="handed")
    await wait_until(lambda: runs == [("w1", "handed", 1)], timeout=10, what="w1 to start the job")
    # When w1 drains past its grace and hands the job back
    finished, handed_back = await rt1.drain(0.1)
    await p1.settler.close(writer1)
    await asyncio.gather(reader1, return_exceptions=True)
    assert (finished, handed_back) == (0, 1)
    # And worker w2 runs it to its end, beside a job whose first attempt fails and is retried
    gate = asyncio.Event()
    gate.set()
    rt2 = GroupRuntime(redis, streams=lanes_in_priority((keys,)), group="workers", consumer="w2", concurrency=2, lease_s=60, block_ms=100)
    p2 = JobProcessor(redis, keys, settings, rt2, Noted("w2", runs, gate))
    writer2 = asyncio.create_task(p2.settler.run())
    async with serving(rt2):
        await Producer(redis, keys).publish(agent, {}, id="flaky")
        ended = await wait_results(redis, keys, 2, timeout=20)
    await p2.settler.close(writer2)
    assert sorted((r.id, r.status.value, r.attempts) for r in ended) == [("flaky", "completed", 2), ("handed", "completed", 1)]
    assert sorted(runs[1:]) == [("w2", "flaky", 1), ("w2", "flaky", 2), ("w2", "handed", 1)]
    # Then the queue wait was observed once per job: at each job's first start only
    assert _waits_observed(agent) == 2
