"""An agent that raises CancelledError of its own (it awaited a task something cancelled, say) while no one cancelled
its job: that is a failed attempt like any other, not a drain's cancellation, which leaves the job to the hand-back."""

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
from tests.support import serving, wait_results


class CancelledOnce(Echo):
    """Runs an agent whose first attempt awaits a task that was cancelled under it."""

    async def execute(self, request: JobRequest, job_id: str, attempt: int, max_attempts: int) -> tuple[Any, dict[str, Any] | None]:
        if attempt == 1:
            inner = asyncio.create_task(asyncio.Event().wait())
            inner.cancel()
            await inner  # raises CancelledError here, though this attempt's task was never cancelled
        return {"attempt": attempt}, None


async def test_an_agents_own_cancelled_error_is_a_failed_attempt(redis: Redis, keys: Keys, settings: StreamSettings) -> None:
    # Given a worker (a 30 s lease) whose agent's first attempt raises CancelledError of its own
    runtime = GroupRuntime(redis, streams=keys.lanes, group="workers", consumer="w1", concurrency=2, lease_s=30, block_ms=100)
    processor = JobProcessor(redis, keys, settings, runtime, CancelledOnce())
    writer = asyncio.create_task(processor.settler.run())
    async with serving(runtime):
        # When it runs a job
        published = await Producer(redis, keys).publish("any", {}, id="self-cancelled")
        # Then the attempt is retried and the job completes, rather than being held, renewed, until the worker stops
        ended = await wait_results(redis, keys, 1, timeout=10)
        assert [(r.id, r.status.value, r.attempts) for r in ended] == [(published.job_id, "completed", 2)]
        assert runtime.in_flight == 0
    await processor.settler.close(writer)
