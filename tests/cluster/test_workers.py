"""Real worker processes on a real Redis Cluster with 6 partitions (contract §10)."""

from __future__ import annotations

from collections import Counter

from redis.asyncio import Redis

from streams.envelope import JobRequest, JobResult
from streams.keys import Keys, partition_keys
from streams.producer import Producer
from streams.records import get_job
from tests.cluster.conftest import PARTITIONS
from tests.support import wait_until


async def all_results(redis: Redis, keys: Keys) -> list[JobResult]:
    out: list[JobResult] = []
    for partition in partition_keys(keys, PARTITIONS):
        out += [JobResult.from_fields(f) for _, f in await redis.xrange(partition.results)]
    return out


async def wait_all_results(redis: Redis, keys: Keys, n: int, *, timeout: float) -> list[JobResult]:
    async def enough() -> bool:
        return sum([int(await redis.xlen(p.results)) for p in partition_keys(keys, PARTITIONS)]) >= n

    await wait_until(enough, timeout=timeout, what=f"{n} results over {PARTITIONS} partitions")
    return await all_results(redis, keys)


async def test_one_result_per_job_over_every_partition(cluster_redis: Redis, cluster_prefix: str, cluster_workers) -> None:
    keys = Keys(cluster_prefix)
    producer = Producer(cluster_redis, keys, partitions=PARTITIONS)
    # Given ids repeated three times, id-less jobs, and a raw XADD into every partition's lane
    with_ids = await producer.publish_many([JobRequest(agent="echo", data={"i": i}, id=f"job-{i % 100}") for i in range(300)])
    assert sum(p.created for p in with_ids) == 100
    idless = await producer.publish_many([JobRequest(agent="echo", data={"i": i}) for i in range(60)], priority="low")
    raw = []
    for p in range(PARTITIONS):
        entry_id = await cluster_redis.xadd(keys.in_partition(p).lane("high"), {"agent": "echo", "data": '{"raw": 1}'})
        raw.append(f"{entry_id}:{p}")
    # When two workers serve every partition
    cluster_workers.start("--concurrency", "50")
    cluster_workers.start("--concurrency", "50")
    # Then each job has exactly one result, in the partition it was placed in
    expected = {f"job-{i}" for i in range(100)} | {p.job_id for p in idless} | set(raw)
    got = await wait_all_results(cluster_redis, keys, len(expected), timeout=60)
    counts = Counter(r.id for r in got)
    assert set(counts) == expected and max(counts.values()) == 1, [i for i, n in counts.items() if n > 1]
    assert all(r.status == "completed" for r in got)
    for job_id in [*raw, "job-7", idless[0].job_id]:
        record = await get_job(cluster_redis, keys, job_id, partitions=PARTITIONS)
        assert record is not None and record.status == "completed", (job_id, record)
