"""A Redis at its maxmemory (noeviction) refuses writes: an outage of writes, ridden out like any other.

Found by a failure-mode review: workers and the notifier started while Redis was full died with a traceback
(a KEDA scale-up on a Black-Friday night would crash-loop every new pod), the gateway answered 500, and a worker
running through it threw finished settle batches away, so their jobs ran again after the lease. Each test has a
Redis of its own (maxmemory is server-wide).
"""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from consumers.processes import streamcrew_cmd
from streams.embedded import RedisServer
from streams.envelope import JobRequest
from streams.keys import Keys
from streams.producer import Producer
from tests.consumers.gateway.support import GatewayFactory
from tests.support import WorkerFactory, wait_for_log, wait_results


@pytest.fixture
async def own(own_redis: RedisServer) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(own_redis.url, decode_responses=True)
    yield client
    await client.aclose()


async def full(client: aioredis.Redis) -> None:
    """Let no write in: maxmemory below what Redis already uses."""
    await client.config_set("maxmemory", 1)
    await client.config_set("maxmemory-policy", "noeviction")


async def test_a_worker_started_on_a_full_redis_waits_then_serves(own_redis: RedisServer, own: aioredis.Redis, prefix: str, tmp_path) -> None:
    # Given a Redis that refuses every write
    await full(own)
    workers = WorkerFactory(own_redis.url, prefix, tmp_path)
    try:
        # When a worker starts, it waits (one line) instead of dying
        worker = workers.start(wait_ready=False)
        wait_for_log(worker, "Redis unavailable (OutOfMemoryError", timeout=60)
        assert worker.alive(), worker.log_text()[-2000:]
        assert "Traceback" not in worker.log_text()
        # When memory is raised, it gets ready and runs jobs
        await own.config_set("maxmemory", 0)
        wait_for_log(worker, " ready: ", timeout=60)
        keys = Keys(prefix)
        await Producer(own, keys).publish("echo", {"n": 1}, id="after-oom")
        (result,) = await wait_results(own, keys, 1, timeout=30)
        assert (result.id, result.status) == ("after-oom", "completed")
    finally:
        workers.close()


async def test_jobs_finished_while_redis_is_full_are_written_later_not_run_again(
    own_redis: RedisServer, own: aioredis.Redis, prefix: str, tmp_path,
) -> None:
    # Given a worker with a short lease, and 60 jobs queued
    keys = Keys(prefix)
    workers = WorkerFactory(own_redis.url, prefix, tmp_path)
    try:
        worker = workers.start("--lease", "2", "--concurrency", "100")
        await Producer(own, keys).publish_many([JobRequest(agent="echo", data={"sleep_s": 0.5}, id=f"oom-{i}") for i in range(60)])
        await wait_for_running(own, keys, 60)
        # When Redis fills up while the jobs run, and stays full for three leases
        await full(own)
        wait_for_log(worker, "Redis unavailable (OutOfMemoryError", timeout=30)
        await wait_log_quiet_for(6.0)
        await own.config_set("maxmemory", 0)
        # Then every job has one result, from its first and only attempt, and the log has no traceback
        done = await wait_results(own, keys, 60, timeout=60)
    finally:
        workers.close()
    assert sorted(r.id for r in done) == sorted(f"oom-{i}" for i in range(60))
    assert {r.attempts for r in done} == {1}, sorted((r.id, r.attempts) for r in done if r.attempts != 1)
    assert "Traceback" not in worker.log_text(), worker.log_text()[-3000:]


async def test_the_gateway_answers_503_and_submit_one_line_while_redis_is_full(
    own_redis: RedisServer, own: aioredis.Redis, prefix: str, tmp_path,
) -> None:
    gateways = GatewayFactory(own_redis.url, prefix, tmp_path)
    try:
        gateway = await gateways.start()
        await full(own)
        async with gateway.client() as client:
            refused = await client.post("/jobs", json={"agent": "echo", "data": {}})
    finally:
        gateways.close()
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "redis_unavailable", refused.text
    assert "out of memory" in refused.json()["error"]["message"] and refused.headers["retry-after"] == "1"
    submit = subprocess.run(streamcrew_cmd("submit", "echo", "--data", "{}", "--redis-url", own_redis.url, "--prefix", prefix),
                            capture_output=True, text=True, timeout=60)
    assert submit.returncode != 0 and "Traceback" not in submit.stderr, submit.stderr
    assert submit.stderr.strip().startswith("Redis refused a write: it is out of memory"), submit.stderr


async def wait_for_running(client: aioredis.Redis, keys: Keys, n: int) -> None:
    from tests.support import wait_until

    async def running() -> bool:
        statuses = [await client.hget(keys.job(f"oom-{i}"), "status") for i in range(n)]
        return statuses.count("running") >= n // 2

    await wait_until(running, timeout=30, what=f"half of {n} jobs running")


async def wait_log_quiet_for(seconds: float) -> None:
    """Redis stays full this long: three 2-second leases, the time the old code took to run the jobs again."""
    import asyncio

    await asyncio.sleep(seconds)
