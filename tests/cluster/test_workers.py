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
    idless_ids = {p.job_id for p in idless}
    for p in range(PARTITIONS):
        entry_id = await cluster_redis.xadd(keys.in_partition(p).lane("high"), {"agent": "echo", "data": '{"raw": 1}'})
        # A raw XADD in the same millisecond as an id-less publish into another lane can get that job's
        # entry ID: the later of the two is then named '<lane>:<entry ID>:<p>', never a false duplicate.
        plain = f"{entry_id}:{p}"
        raw.append(f"high:{plain}" if plain in idless_ids else plain)
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


async def test_strict_lane_priority_across_partitions(cluster_redis: Redis, cluster_prefix: str, cluster_workers) -> None:
    keys = Keys(cluster_prefix)
    producer = Producer(cluster_redis, keys, partitions=PARTITIONS)
    # Given low jobs (10 ms each) queued in every partition before high ones, and one worker running one job at a time
    low = await producer.publish_many([JobRequest(agent="echo", data={"sleep_s": 0.01}, id=f"low-{i}") for i in range(24)], priority="low")
    high = await producer.publish_many([JobRequest(agent="echo", data={}, id=f"high-{i}") for i in range(24)], priority="high")
    assert len({keys_of(p.job_id) for p in high}) == PARTITIONS
    cluster_workers.start("--concurrency", "1")
    await wait_all_results(cluster_redis, keys, 48, timeout=60)
    # Then every high job started before any low job, whatever partition each was in
    started = {r.id: r.started_at or 0 for r in await all_results(cluster_redis, keys)}
    assert max(started[p.job_id] for p in high) <= min(started[p.job_id] for p in low)
    # And the partitions' low backlogs took turns: the first low jobs to run came one from each partition
    holding = {keys_of(p.job_id) for p in low}
    first = sorted(low, key=lambda p: started[p.job_id])[: len(holding)]
    assert {keys_of(p.job_id) for p in first} == holding, [(p.job_id, keys_of(p.job_id)) for p in first]


def keys_of(job_id: str) -> int:
    from streams.keys import partition_of

    return partition_of(job_id, PARTITIONS)


async def test_partition_ranges_split_the_work(cluster_redis: Redis, cluster_prefix: str, cluster_workers) -> None:
    keys = Keys(cluster_prefix)
    producer = Producer(cluster_redis, keys, partitions=PARTITIONS)
    published = await producer.publish_many([JobRequest(agent="echo", data={}, id=f"r-{i}") for i in range(60)])
    first_half = [p.job_id for p in published if keys_of(p.job_id) < 3]
    # Given a worker that reads partitions 0-2 only
    cluster_workers.start("--partitions", "0-2")
    await wait_all_results(cluster_redis, keys, len(first_half), timeout=60)
    # Then only their jobs ran; the others wait for a worker of 3-5
    done = {r.id for r in await all_results(cluster_redis, keys)}
    assert done == set(first_half)
    cluster_workers.start("--partitions", "3-5")
    await wait_all_results(cluster_redis, keys, 60, timeout=60)


async def test_sigkilled_worker_jobs_are_reclaimed_in_every_partition(cluster_redis: Redis, cluster_prefix: str, cluster_workers) -> None:
    keys = Keys(cluster_prefix)
    producer = Producer(cluster_redis, keys, partitions=PARTITIONS)
    ids = [f"slow-{i}" for i in range(18)]
    # Given a worker with a 2 s lease holding 18 one-second jobs spread over the partitions
    victim = cluster_workers.start("--concurrency", "18", "--lease", "2")
    await producer.publish_many([JobRequest(agent="echo", data={"sleep_s": 1}, id=jid) for jid in ids])
    assert len({keys_of(j) for j in ids}) == PARTITIONS

    async def all_running() -> bool:
        records = [await get_job(cluster_redis, keys, j, partitions=PARTITIONS) for j in ids]
        return all(r is not None and r.status == "running" for r in records)

    await wait_until(all_running, timeout=30, what="18 jobs running on the victim")
    # When it is SIGKILLed and another worker starts
    victim.kill()
    cluster_workers.start("--concurrency", "18", "--lease", "2")
    # Then each job completes once, on its second attempt
    got = await wait_all_results(cluster_redis, keys, len(ids), timeout=60)
    assert sorted(r.id for r in got) == sorted(ids)
    assert all(r.status == "completed" and r.attempts == 2 for r in got), [(r.id, r.attempts) for r in got]


async def test_retries_and_dead_letters_stay_in_their_partition(cluster_redis: Redis, cluster_prefix: str, cluster_workers) -> None:
    keys = Keys(cluster_prefix)
    producer = Producer(cluster_redis, keys, partitions=PARTITIONS)
    # Given jobs in every partition that fail once (then succeed), and jobs that fail past their budget
    flaky = [f"flaky-{i}" for i in range(12)]
    doomed = [f"doomed-{i}" for i in range(12)]
    await producer.publish_many([JobRequest(agent="echo", data={"fail_first": 1}, id=j, max_attempts=3) for j in flaky])
    await producer.publish_many([JobRequest(agent="echo", data={"fail_first": 5}, id=j, max_attempts=2) for j in doomed])
    assert len({keys_of(j) for j in flaky}) > 1 and len({keys_of(j) for j in doomed}) > 1
    cluster_workers.start("--concurrency", "20")
    got = await wait_all_results(cluster_redis, keys, len(flaky) + len(doomed), timeout=60)
    by_id = {r.id: r for r in got}
    assert len(got) == len(by_id) == 24
    # Then the flaky ones completed on attempt 2, the doomed ones failed after 2 attempts
    assert all(by_id[j].status == "completed" and by_id[j].attempts == 2 for j in flaky)
    assert all(by_id[j].status == "failed" and by_id[j].attempts == 2 for j in doomed)
    # And each dead letter is in the dead stream of its job's partition
    for j in doomed:
        letters = await cluster_redis.xrange(keys.in_partition(keys_of(j)).dead)
        assert [f["id"] for _, f in letters].count(j) == 1, j
