"""A draining worker hands back only what is still its own: a job another worker took over (XAUTOCLAIM, this
worker's lease having looked stalled) stays with that worker, whose run would otherwise be fenced off and a third
run follow, every one of them paying for its agent's calls."""

from __future__ import annotations

import asyncio
from typing import Any

from redis.asyncio import Redis

from streams.config import StreamSettings
from streams.envelope import JobRequest
from streams.jobs import JobProcessor
from streams.keys import Keys
from streams.producer import Producer
from streams.runtime import GroupRuntime
from tests.streams.test_resent_calls import Echo
from tests.support import serving, wait_results, wait_until


class Gated(Echo):
    """Runs an agent that notes which worker runs it, then waits for the test's gate."""

    def __init__(self, worker: str, runs: list[str], gate: asyncio.Event) -> None:
        self.worker, self.runs, self.gate = worker, runs, gate

    async def execute(self, request: JobRequest, job_id: str, attempt: int, max_attempts: int) -> tuple[Any, dict[str, Any] | None]:
        self.runs.append(self.worker)
        await self.gate.wait()
        return {"by": self.worker, "attempt": attempt}, None


async def test_a_drain_leaves_a_job_another_worker_took_over_with_that_worker(redis: Redis, keys: Keys, settings: StreamSettings) -> None:
    # Given worker w1 (a 120 s lease: it renews nothing within the test) running a job that waits for the gate
    runs: list[str] = []
    gate = asyncio.Event()
    rt1 = GroupRuntime(redis, streams=keys.lanes, group="workers", consumer="w1", concurrency=2, lease_s=120, block_ms=100)
    p1 = JobProcessor(redis, keys, settings, rt1, Gated("w1", runs, gate))
    writer1 = asyncio.create_task(p1.settler.run())
    reader1 = asyncio.create_task(rt1.run())
    await Producer(redis, keys).publish("echo", {}, id="taken-over")
    await wait_until(lambda: runs == ["w1"], timeout=10, what="w1 to run the job")
    # And worker w2 (a 1 s lease) that takes it over, as w1's lease looks stalled to it, and runs it too
    rt2 = GroupRuntime(redis, streams=keys.lanes, group="workers", consumer="w2", concurrency=2, lease_s=1, block_ms=100)
    p2 = JobProcessor(redis, keys, settings, rt2, Gated("w2", runs, gate))
    writer2 = asyncio.create_task(p2.settler.run())
    async with serving(rt2):
        await wait_until(lambda: runs == ["w1", "w2"], timeout=10, what="w2 to take the job over and run it")
        # When w1 drains while both runs go on: its grace passes, and it hands back what it still runs
        finished, handed_back = await rt1.drain(0.1)
        await p1.settler.close(writer1)
        await asyncio.gather(reader1, return_exceptions=True)
        # Then the job stays with w2, which finishes it; no copy went back to the lane for a third run
        gate.set()
        (ended,) = await wait_results(redis, keys, 1, timeout=10)
        assert runs == ["w1", "w2"], f"the job ran again after w2's run: {runs}"
        assert (ended.id, ended.status.value, ended.worker, ended.attempts) == ("taken-over", "completed", "w2", 2)
        assert await redis.xlen(keys.lane("normal")) == 1, "w1's hand-back XADDed a copy of the job w2 was running"
        assert (finished, handed_back) == (0, 0)
        await wait_until(lambda: _none_pending(redis, keys), timeout=5, what="w2 to ack its entry")
    await p2.settler.close(writer2)


async def _none_pending(redis: Redis, keys: Keys) -> bool:
    return int((await redis.xpending(keys.lane("normal"), "workers"))["pending"]) == 0

