"""What a worker counts is what it wrote: an attempt that fails after another worker took its job over and
finished it schedules no retry (settle.lua fences the op off), so it is no retry in ``streamcrew_retries_total``."""

from __future__ import annotations

import asyncio
from typing import Any

from prometheus_client import REGISTRY
from redis.asyncio import Redis

from streams.config import StreamSettings
from streams.envelope import JobRequest
from streams.jobs import JobProcessor
from streams.keys import Keys
from streams.producer import Producer
from streams.runtime import GroupRuntime
from tests.streams.test_resent_calls import Echo
from tests.support import serving, wait_results, wait_until


class FailsAtGate(Echo):
    """An agent that notes its run, then fails once the test opens the gate."""

    def __init__(self, runs: list[str], gate: asyncio.Event) -> None:
        self.runs, self.gate = runs, gate

    async def execute(self, request: JobRequest, job_id: str, attempt: int, max_attempts: int) -> tuple[Any, dict[str, Any] | None]:
        self.runs.append("w1")
        await self.gate.wait()
        raise RuntimeError("the provider went away")


def _retries(agent: str) -> float:
    return REGISTRY.get_sample_value("streamcrew_retries_total", {"agent": agent}) or 0.0


async def test_a_retry_fenced_off_by_a_finished_takeover_is_not_counted(redis: Redis, keys: Keys, settings: StreamSettings) -> None:
    # Given worker w1 (a 120 s lease: it renews nothing within the test) running a job whose attempt will fail
    runs: list[str] = []
    gate = asyncio.Event()
    rt1 = GroupRuntime(redis, streams=keys.lanes, group="workers", consumer="w1", concurrency=2, lease_s=120, block_ms=100)
    p1 = JobProcessor(redis, keys, settings, rt1, FailsAtGate(runs, gate))
    writer1 = asyncio.create_task(p1.settler.run())
    reader1 = asyncio.create_task(rt1.run())
    await Producer(redis, keys).publish("echo", {}, id="fenced-retry")
    await wait_until(lambda: runs == ["w1"], timeout=10, what="w1 to run the job")
    # And worker w2 (a 1 s lease) that takes the job over and completes it
    rt2 = GroupRuntime(redis, streams=keys.lanes, group="workers", consumer="w2", concurrency=2, lease_s=1, block_ms=100)
    p2 = JobProcessor(redis, keys, settings, rt2, Echo())
    writer2 = asyncio.create_task(p2.settler.run())
    async with serving(rt2):
        (ended,) = await wait_results(redis, keys, 1, timeout=10)
        assert (ended.status.value, ended.worker) == ("completed", "w2")
        before = _retries("echo")
        # When w1's attempt then fails, and its retry op reaches settle.lua
        gate.set()
        await wait_until(lambda: not p1._running, timeout=10, what="w1's failed attempt to settle")
        await p1.settler.flush()
        # Then no retry was scheduled, and none is counted
        assert await redis.zcard(keys.delayed) == 0, "a retry was scheduled for a job that had completed"
        assert _retries("echo") == before, "a retry settle.lua turned away was counted"
    for rt, processor, writer in ((rt1, p1, writer1), (None, p2, writer2)):
        if rt is not None:
            await rt.drain(0.1)
        await processor.settler.close(writer)
    await asyncio.gather(reader1, return_exceptions=True)
