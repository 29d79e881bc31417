"""A worker whose jobs end one at a time claims and settles them in batches (STREAMCREW_REFILL_WAIT_MS).

Counted on a Redis of the test's own (``INFO commandstats``): with the wait off, a full pool reads and
settles about once per job that ends (the empty high lane is watched, streams.quiet); with the default,
once per several.
"""

from __future__ import annotations

import random
from pathlib import Path

import redis as sync_redis
from redis.asyncio import Redis

from streams.embedded import RedisServer
from streams.envelope import JobRequest
from streams.keys import Keys
from streams.producer import Producer
from tests.support import WorkerFactory, wait_results

JOBS = 400
CONCURRENCY = 100  # the default wait reads again once 10 slots are free


async def calls_per_job(server: RedisServer, tmp_path: Path, name: str, refill_wait_ms: str | None) -> tuple[float, float]:
    """XREADGROUP and EVALSHA calls per job for one worker running JOBS jobs of 0.2 - 0.6 s on ``server``."""
    keys = Keys(f"refill-{name}")
    factory = WorkerFactory(server.url, keys.prefix, tmp_path / name)
    (tmp_path / name).mkdir()
    redis = Redis.from_url(server.url, decode_responses=True)
    try:
        factory.start("--concurrency", str(CONCURRENCY), env={} if refill_wait_ms is None else {"STREAMCREW_REFILL_WAIT_MS": refill_wait_ms})
        with sync_redis.Redis.from_url(server.url) as admin:
            admin.config_resetstat()
        rng = random.Random(3)
        await Producer(redis, keys).publish_many([JobRequest(agent="echo", data={"sleep_s": round(rng.uniform(0.2, 0.6), 3)}) for _ in range(JOBS)])
        got = await wait_results(redis, keys, JOBS, timeout=60)
        assert len({r.id for r in got}) == JOBS and all(r.status == "completed" for r in got)
        with sync_redis.Redis.from_url(server.url) as admin:
            stats = admin.info("commandstats")
    finally:
        factory.close()
        await redis.aclose()
    return stats["cmdstat_xreadgroup"]["calls"] / JOBS, stats["cmdstat_evalsha"]["calls"] / JOBS


async def test_a_full_pool_reads_and_settles_once_per_several_jobs(own_redis: RedisServer, tmp_path: Path) -> None:
    # Given a worker of 100 slots and 400 jobs whose times are spread out (0.2 - 0.6 s), so they end one at a time
    # When one worker runs them with the refill wait off, and another with the default
    reads_at_once, scripts_at_once = await calls_per_job(own_redis, tmp_path, "off", "0")
    reads, scripts = await calls_per_job(own_redis, tmp_path, "default", None)
    # Then the default reads, and calls scripts (publish, start, settle), at most half as often per job
    assert reads_at_once > 0.4, f"the wait off should read about once per job ending: {reads_at_once:.2f}"
    assert reads <= reads_at_once / 2, f"reads per job: {reads:.2f} with the default wait, {reads_at_once:.2f} without"
    assert scripts <= scripts_at_once / 2, f"script calls per job: {scripts:.2f} with the default wait, {scripts_at_once:.2f} without"
