"""A job whose output ends it failed at the finish (``too_large``, ``unencodable``) is a failed attempt in the
worker's summary line and its per-attempt DEBUG line, as it is in ``streamcrew_jobs_total`` and its result."""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

import pytest
from redis.asyncio import Redis

from streams.config import StreamSettings
from streams.envelope import JobRequest
from streams.jobs import JobProcessor
from streams.keys import Keys
from streams.producer import Producer
from streams.runtime import GroupRuntime
from tests.streams.test_resent_calls import Echo
from tests.support import serving, wait_results, wait_until

MAX_RESULT_BYTES = 1000


class Answers(Echo):
    """An agent whose output is too large for one job and not JSON for another."""

    async def execute(self, request: JobRequest, job_id: str, attempt: int, max_attempts: int) -> tuple[Any, dict[str, Any] | None]:
        return ("x" * 10 * MAX_RESULT_BYTES if job_id == "big" else {"a set": {1, 2}}), None


async def test_a_result_too_large_or_unencodable_is_tallied_failed(redis: Redis, keys: Keys, redis_url: str,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    # Given a worker with a 1000-byte result limit
    settings = StreamSettings(redis_url=redis_url, prefix=keys.prefix, max_result_bytes=MAX_RESULT_BYTES)
    runtime = GroupRuntime(redis, streams=keys.lanes, group="workers", consumer="w1", concurrency=2, lease_s=30, block_ms=100)
    processor = JobProcessor(redis, keys, settings, runtime, Answers(), summary_every_s=0.001)
    writer = asyncio.create_task(processor.settler.run())
    with caplog.at_level(logging.DEBUG, logger="streamcrew.jobs"):
        async with serving(runtime):
            # When one job's output is too large and another's cannot be encoded
            await Producer(redis, keys).publish("echo", {}, id="big")
            await Producer(redis, keys).publish("echo", {}, id="odd")
            ended = await wait_results(redis, keys, 2, timeout=10)
            assert sorted((r.id, r.status.value) for r in ended) == [("big", "failed"), ("odd", "failed")]
            await wait_until(lambda: not processor._running, timeout=10, what="both attempts to settle")
            await processor.settler.flush()
            await processor.tick()
        await processor.settler.close(writer)
    said = [r.getMessage() for r in caplog.records if r.name == "streamcrew.jobs"]
    # Then the summary line counts two failed attempts, none completed
    (summary,) = [line for line in said if line.startswith("jobs: ")]
    assert re.search(r"\): failed=2; p95", summary), summary
    # And each attempt's DEBUG line says failed
    outcomes = sorted(re.findall(r"job=(\w+) agent=echo lane=normal attempt=1 outcome=(\w+)", "\n".join(said)))
    assert outcomes == [("big", "failed"), ("odd", "failed")], said
