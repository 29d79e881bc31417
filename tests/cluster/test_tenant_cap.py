"""STREAMCREW_TENANT_MAX_RUNNING on a real Redis Cluster with 6 partitions: each partition counts on its own, in its
own hash slot, and allows ceil(N / P) of a tenant's jobs."""

from __future__ import annotations

from collections import Counter

from redis.asyncio import Redis

from streams.envelope import JobRequest
from streams.keys import Keys, partition_keys, partition_of
from streams.producer import Producer
from streams.tenant_cap import parked_tenants_key
from tests.cluster.conftest import PARTITIONS
from tests.cluster.test_workers import wait_all_results
from tests.support import most_at_once


async def test_each_partition_runs_its_share_of_a_tenants_cap(cluster_redis: Redis, cluster_prefix: str, cluster_workers) -> None:
    # Given a cap of 6 over 6 partitions (1 per partition) and one worker of 20 slots
    keys = Keys(cluster_prefix)
    producer = Producer(cluster_redis, keys, partitions=PARTITIONS)
    cluster_workers.start("--concurrency", "20", env={"STREAMCREW_TENANT_MAX_RUNNING": '{"*": 100, "A": 6}'})
    # When tenant A submits 36 slow jobs and tenant B one
    await producer.publish_many([JobRequest(agent="echo", data={"sleep_s": 0.2}, id=f"a-{i}", tenant="A") for i in range(36)])
    await producer.publish("echo", {"sleep_s": 0.2}, id="b-0", tenant="B")
    got = await wait_all_results(cluster_redis, keys, 37, timeout=90)
    # Then each job completed once, never two of A's at once in one partition, and nothing is left parked
    counts = Counter(r.id for r in got)
    assert len(counts) == 37 and max(counts.values()) == 1 and all(r.status == "completed" for r in got)
    spans: dict[int, list[tuple[int, int]]] = {}
    for r in got:
        if r.tenant == "A":
            spans.setdefault(partition_of(r.id, PARTITIONS), []).append((r.started_at, r.finished_at))
    assert all(most_at_once(s) <= 1 for s in spans.values()), spans
    assert any(len(s) > 1 for s in spans.values())
    for p in partition_keys(keys, PARTITIONS):
        assert await cluster_redis.hlen(parked_tenants_key(p)) == 0
