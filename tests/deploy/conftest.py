"""Fixtures of the deploy tests: the Prometheus binaries, and a worker exporting /metrics after real jobs."""

from __future__ import annotations

from dataclasses import dataclass

import httpx
import pytest

from streams.envelope import JobRequest
from streams.keys import Keys
from tests.deploy.support import binary
from tests.support import WorkerFactory, wait_results, wait_until

JOBS = 12  # completed ones; plus one dead letter and one malformed request


@pytest.fixture
def promtool() -> str:
    return binary("promtool")


@pytest.fixture
def prometheus_bin() -> str:
    return binary("prometheus")


@dataclass(frozen=True)
class MetricsWorker:
    port: int
    completed: int
    ended: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"


@pytest.fixture
async def metrics_worker(redis, keys: Keys, producer, workers: WorkerFactory) -> MetricsWorker:
    """A running ``streamcrew worker`` with /metrics on a free port, after 12 completed jobs, 1 failed, 1 rejected."""
    _, port = workers.start_serving_metrics("--concurrency", "8")
    await producer.publish_many([JobRequest(agent="echo", data={"i": i}) for i in range(JOBS)], priority="high")
    await producer.publish("echo", {"fail_first": 9}, id="hopeless", max_attempts=1, priority="low")
    await redis.xadd(keys.lane("normal"), {"agent": "echo", "data": "not json", "id": "malformed"})
    await wait_results(redis, keys, JOBS + 2, timeout=30)

    async def counted() -> bool:
        async with httpx.AsyncClient() as client:
            text = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
        return f'streamcrew_jobs_total{{agent="echo",status="completed"}} {float(JOBS)}' in text

    await wait_until(counted, timeout=10, what=f"the worker's /metrics to count {JOBS} completed jobs")
    return MetricsWorker(port=port, completed=JOBS, ended=JOBS + 2)
