"""Partitioned keys on a real Redis Cluster: placement by crc32, id-less ids naming their partition, lookup by id alone."""

from __future__ import annotations

import zlib
from collections import Counter

from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

from streams.connection import cluster_enabled, connect, connect_detected
from streams.envelope import JobRequest
from streams.keys import Keys, partition_of
from streams.producer import Producer
from streams.records import get_job

from tests.cluster.conftest import PARTITIONS
from tests.cluster_support import LocalCluster


async def test_cluster_mode_is_detected_from_the_server(cluster: LocalCluster, redis_url: str) -> None:
    assert await cluster_enabled(cluster.url)
    assert not await cluster_enabled(redis_url)
    client = await connect_detected(cluster.url)
    try:
        assert isinstance(client, RedisCluster)
    finally:
        await client.aclose()


async def test_ids_land_in_crc32_partitions_and_are_found_by_id(cluster: LocalCluster, cluster_prefix: str) -> None:
    redis = await connect_detected(cluster.url)
    keys = Keys(cluster_prefix)
    try:
        producer = Producer(redis, keys, partitions=PARTITIONS)
        ids = [f"order-{i}" for i in range(60)]
        published = await producer.publish_many([JobRequest(agent="echo", data={"i": i}, id=jid) for i, jid in enumerate(ids)])
        assert [p.job_id for p in published] == ids and all(p.created for p in published)
        for jid in ids:
            p = zlib.crc32(jid.encode()) % PARTITIONS
            assert await redis.hget(f"{cluster_prefix}:{{{p}}}:job:{jid}", "status") == "queued", jid
            record = await get_job(redis, keys, jid, partitions=PARTITIONS)
            assert record is not None and record.id == jid
        per_partition = Counter(partition_of(jid, PARTITIONS) for jid in ids)
        assert len(per_partition) == PARTITIONS, per_partition
        lane_lengths = [await redis.xlen(keys.in_partition(p).lane("normal")) for p in range(PARTITIONS)]
        assert lane_lengths == [per_partition[p] for p in range(PARTITIONS)]
        # a repeated id meets its first copy in the same partition
        again = await producer.publish_many([JobRequest(agent="echo", data={}, id=jid) for jid in ids[:10]])
        assert not any(p.created for p in again)
        assert sum([await redis.xlen(keys.in_partition(p).lane("normal")) for p in range(PARTITIONS)]) == len(ids)
    finally:
        await redis.aclose()


async def test_idless_jobs_spread_and_their_ids_name_the_partition(cluster: LocalCluster, cluster_prefix: str) -> None:
    redis = await connect_detected(cluster.url)
    keys = Keys(cluster_prefix)
    try:
        producer = Producer(redis, keys, partitions=PARTITIONS)
        published = await producer.publish_many([JobRequest(agent="echo", data={"i": i}) for i in range(30)], priority="high")
        seen = Counter()
        for one in published:
            entry_id, p = one.job_id.rsplit(":", 1)
            assert partition_of(one.job_id, PARTITIONS) == int(p)
            seen[int(p)] += 1
            record = await get_job(redis, keys, one.job_id, partitions=PARTITIONS)
            assert record is not None and record.status == "queued" and record.lane == "high"
            assert record.id == one.job_id
        assert sorted(seen) == list(range(PARTITIONS)), seen
    finally:
        await redis.aclose()


async def test_each_partition_is_one_slot_on_its_placed_master(cluster: LocalCluster, cluster_prefix: str) -> None:
    keys = Keys(cluster_prefix).in_partition(3)
    slots = {key_slot(k.encode()) for k in (*keys.lanes, keys.results, keys.dead, keys.delayed, keys.clock, keys.job("x"))}
    assert slots == {key_slot(b"{3}")}


async def test_unpartitioned_keys_stay_as_in_section_1(redis_url: str) -> None:
    redis = connect(redis_url)
    try:
        keys = Keys("plain")
        producer = Producer(redis, keys)
        (one,) = await producer.publish_many([JobRequest(agent="echo", data={})])
        assert ":" not in one.job_id and await redis.exists(f"plain:job:{one.job_id}")
        await redis.delete(*[k async for k in redis.scan_iter(match="plain:*")])
    finally:
        await redis.aclose()


async def test_stats_sum_the_partitions_and_show_each(cluster: LocalCluster, cluster_prefix: str) -> None:
    from streams.partition_stats import partitioned_queue_stats

    redis = await connect_detected(cluster.url)
    keys = Keys(cluster_prefix)
    try:
        producer = Producer(redis, keys, partitions=PARTITIONS)
        await producer.publish_many([JobRequest(agent="echo", data={}, id=f"s-{i}") for i in range(40)], priority="low")
        figures = await partitioned_queue_stats(redis, keys, PARTITIONS)
        assert figures["lanes"]["low"]["length"] == 40
        assert figures["lanes"]["high"]["length"] == 0
        assert figures["lanes"]["low"]["stream"] == f"{cluster_prefix}:{{*}}:requests:low"
        each = [p["lanes"]["low"]["length"] for p in figures["partitions"]]
        assert each == [sum(partition_of(f"s-{i}", PARTITIONS) == p for i in range(40)) for p in range(PARTITIONS)]
    finally:
        await redis.aclose()


async def test_a_producer_shared_by_many_tasks_at_once_publishes_every_request_on_a_cluster(cluster: LocalCluster, cluster_prefix: str) -> None:
    """redis-py holds a cluster node to 100 connections and failed every call past them at once (MaxConnectionsError):
    an asyncio.gather of 600 publishes over 3 masters lost about half. Calls past them now wait for a free one."""
    import asyncio

    redis = await connect_detected(cluster.url)
    keys = Keys(cluster_prefix)
    try:
        producer = Producer(redis, keys, partitions=PARTITIONS)
        published = await asyncio.gather(*(producer.publish("echo", {"i": i}, id=f"many-{i}") for i in range(600)), return_exceptions=True)
        failed = [p for p in published if isinstance(p, BaseException)]
        assert not failed, f"{len(failed)} of 600 failed, e.g. {failed[0]!r}"
        records = await asyncio.gather(*(get_job(redis, keys, f"many-{i}", partitions=PARTITIONS) for i in range(600)), return_exceptions=True)
        assert all(r is not None and not isinstance(r, BaseException) for r in records)
    finally:
        await redis.aclose()
