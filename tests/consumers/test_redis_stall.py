"""A Redis that stalls past the clients' 15 s socket timeout (a slow command, a paused VM, a swapping host) and
then comes back: redis-py gave the replies up and sent the calls again, and Redis runs every copy. A real worker
and producer come through with one job and one result per request, each counted as one attempt, no `fenced`."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from streams.connection import SOCKET_TIMEOUT_S, connect
from streams.embedded import RedisServer
from streams.envelope import JobRequest
from streams.keys import LANES, Keys
from streams.producer import Producer
from tests.support import WorkerFactory, results, stall_redis, wait_results, wait_until

STALL_MS = int(SOCKET_TIMEOUT_S * 1000) + 2000
BEFORE, DURING = 60, 5


async def test_a_stall_past_the_socket_timeout_runs_each_request_once(own_redis: RedisServer, tmp_path: Path) -> None:
    # Given a worker with 10 slots busy with 60 id-less jobs of one attempt each (a second attempt counted would end
    # one "exhausted")
    redis = connect(own_redis.url)
    keys = Keys("stall")
    producer = Producer(redis, keys)
    workers = WorkerFactory(own_redis.url, keys.prefix, tmp_path)
    try:
        worker = workers.start("--concurrency", "10")
        await producer.publish_many([JobRequest(agent="echo", data={"sleep_s": 0.2, "i": i}, max_attempts=1) for i in range(BEFORE)])
        await wait_until(lambda: redis.xlen(keys.results), timeout=30, what="the worker's first result")
        # When Redis stalls 2 s past the socket timeout while the worker starts and settles jobs, and a producer
        # publishes 5 more id-less jobs into the stall (its call is sent again before Redis is back)
        stall = await stall_redis(own_redis, STALL_MS)
        during = await producer.publish_many([JobRequest(agent="echo", data={"during": i}, max_attempts=1) for i in range(DURING)])
        await stall

        # Then once the lanes are drained, there is one result per request: no orphan job the producer never named
        async def drained() -> bool:
            for lane in LANES:
                if await redis.exists(keys.lane(lane)) and (await redis.xpending(keys.lane(lane), "workers"))["pending"]:
                    return False
            return not await redis.zcard(keys.delayed)

        await wait_results(redis, keys, BEFORE + DURING, timeout=60)
        await wait_until(drained, timeout=30, what="no job pending or delayed")
        ended = await results(redis, keys)
        assert len(ended) == BEFORE + DURING, Counter(r.agent for r in ended)
        assert {p.job_id for p in during} <= {r.id for r in ended}
        # And each completed in its one attempt, and the worker reported none of its own endings as fenced
        assert Counter((r.status.value, r.attempts) for r in ended) == {("completed", 1): BEFORE + DURING}
        assert "outcome=fenced" not in worker.log_text()
    finally:
        workers.close()
        await redis.aclose()
