"""Helpers of the workflow tests: wait for a job's result event, count events per id."""

from __future__ import annotations

from collections import Counter
from typing import Any

from streams.envelope import JobResult
from streams.keys import Keys
from tests.support import WorkerFactory, results, wait_for_log, wait_until

READY_TIMEOUT_S = 90.0  # a worker imports CrewAI at start: slow on a loaded machine


def start_workers(workers: WorkerFactory, n: int, *args: str) -> list[Any]:
    """Start ``n`` workers side by side, then wait until each is ready."""
    children = [workers.start(*args, wait_ready=False) for _ in range(n)]
    for child in children:
        wait_for_log(child, " ready: ", timeout=READY_TIMEOUT_S)
    return children


async def events_of(redis: Any, keys: Keys, job_id: str) -> list[JobResult]:
    return [r for r in await results(redis, keys) if r.id == job_id]


async def wait_event(redis: Any, keys: Keys, job_id: str, *, timeout: float = 30.0, n: int = 1) -> JobResult:
    """The ``n``-th result event of ``job_id`` (waits for it)."""

    async def arrived() -> bool:
        return len(await events_of(redis, keys, job_id)) >= n

    await wait_until(arrived, timeout=timeout, what=f"result event #{n} of {job_id}")
    return (await events_of(redis, keys, job_id))[n - 1]


async def event_counts(redis: Any, keys: Keys) -> Counter[str]:
    return Counter(r.id for r in await results(redis, keys))
