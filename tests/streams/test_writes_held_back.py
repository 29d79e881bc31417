"""Redis refusing writes for a while (NOREPLICAS: fewer replicas than min-replicas-to-write; MISCONF: a failed
snapshot on a full disk; BUSY: a script past its time limit) is an outage to wait out, not a refusal: finished
jobs' settles wait and are written once Redis takes writes again, so no job runs twice and no loop logs a
traceback per pass. A Redis of the test's own: the setting would refuse every other test's writes."""

from __future__ import annotations

import subprocess

import pytest
import redis as sync_redis

from consumers.processes import streamcrew_cmd
from streams.connection import connect
from streams.embedded import RedisServer, path_binary
from streams.keys import Keys
from streams.outage import REDIS_DOWN, WritesHeldBack
from streams.producer import Producer
from streams.records import get_job
from tests.consumers.gateway.support import GatewayFactory
from tests.support import WorkerFactory, wait_for_log, wait_until

pytestmark = pytest.mark.skipif(path_binary() is None, reason="needs redis-server on PATH")

JOBS = 20


async def test_settles_wait_while_redis_takes_no_writes_and_no_job_runs_twice(tmp_path) -> None:  # type: ignore[no-untyped-def]
    server = RedisServer(str(path_binary())).start()
    redis = connect(server.url)
    keys = Keys("held")
    workers = WorkerFactory(server.url, keys.prefix, tmp_path)
    try:
        # Given a worker running 20 jobs of 1.5 s
        worker = workers.start()
        ids = [(await Producer(redis, keys).publish("echo", {"sleep_s": 1.5}, id=f"held-{i}")).job_id for i in range(JOBS)]

        async def all_running() -> bool:
            records = [await get_job(redis, keys, job_id) for job_id in ids]
            return all(r is not None and r.status == "running" for r in records)

        await wait_until(all_running, timeout=30, what="the 20 jobs running")
        # When Redis takes no writes (no replica for min-replicas-to-write 1) while they finish
        with sync_redis.Redis.from_url(server.url) as admin:
            admin.config_set("min-replicas-to-write", 1)
            try:
                wait_for_log(worker, "settle: Redis unavailable (WritesHeldBack", timeout=30)
                with pytest.raises(WritesHeldBack):  # what a streams client raises for it, an outage to every loop
                    await redis.set("held:probe", "1")
                assert issubclass(WritesHeldBack, REDIS_DOWN)
            finally:
                admin.config_set("min-replicas-to-write", 0)

        # Then once it takes writes again, every job has its one result, from its first attempt
        async def all_done() -> bool:
            return int(await redis.xlen(keys.results)) >= JOBS

        await wait_until(all_done, timeout=30, what="20 results once Redis takes writes again (not after the 60 s lease)")
        records = [await get_job(redis, keys, job_id) for job_id in ids]
        assert [(r.status, r.attempts) for r in records if r] == [("completed", 1)] * JOBS, records
        assert int(await redis.xlen(keys.results)) == JOBS
        log = worker.log_text()
        assert "Traceback" not in log and "refused" not in log, log[-3000:]
    finally:
        workers.close()
        await redis.aclose()
        server.close()


async def test_the_gateway_answers_503_and_submit_one_line_while_redis_takes_no_writes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    server = RedisServer(str(path_binary())).start()
    gateways = GatewayFactory(server.url, "held", tmp_path)
    try:
        gateway = await gateways.start()
        with sync_redis.Redis.from_url(server.url) as admin:
            admin.config_set("min-replicas-to-write", 1)
        async with gateway.client() as client:
            refused = await client.post("/jobs", json={"agent": "echo", "data": {}})
        submit = subprocess.run(streamcrew_cmd("submit", "echo", "--data", "{}", "--redis-url", server.url, "--prefix", "held"),
                                capture_output=True, text=True, timeout=60)
    finally:
        gateways.close()
        server.close()
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "redis_unavailable", refused.text
    assert refused.headers["retry-after"] == "1"
    assert submit.returncode == 4 and "Traceback" not in submit.stderr, submit.stderr
    assert submit.stderr.strip().startswith("Redis takes no writes for now"), submit.stderr
