"""The Kafka bridge on a real Redis Cluster with 6 partitions (contracts §10, §11), through faust's test path.

Requests land in their crc32 partition on the shard that owns it; the results of every partition reach the
(results-topic) send keyed by job id and are XACKed in their own partition's stream.
"""

from __future__ import annotations

import shutil

import pytest
from redis.asyncio import Redis

from streams.keys import Keys, partition_of
from streams.records import get_job
from tests.cluster.conftest import PARTITIONS
from tests.cluster_support import LocalCluster

pytest.importorskip("faust", reason="the Kafka bridge needs faust-streaming: pip install 'streamcrew[kafka]'")

from consumers.kafka_bridge.app import build_bridge  # noqa: E402
from consumers.kafka_bridge.settings import KafkaBridgeSettings  # noqa: E402
from tests.consumers.kafka.results_path import Kafka, add_results, forward_with_runtime, group_state  # noqa: E402

JOBS = 120


async def test_the_bridge_publishes_and_forwards_every_partition_on_a_cluster(
    cluster: LocalCluster, cluster_redis: Redis, cluster_prefix: str,
) -> None:
    keys = Keys(cluster_prefix)
    settings = KafkaBridgeSettings(redis_url=cluster.url, prefix=cluster_prefix, kafka_broker="kafka://127.0.0.1:9", metrics_port=0,
                                   partitions=PARTITIONS, lease_s=5)
    bridge = build_bridge(settings, cluster_redis, consumer="cluster-bridge")
    try:
        ids = [f"order-{n}" for n in range(JOBS)]
        # Requests topic -> lanes: each job in its crc32 partition
        async with bridge.requests_agent.test_context() as agent:
            for job_id in ids:
                await agent.put(b'{"agent": "echo", "data": {}}', key=job_id.encode())
        assert [o.published for o in agent.results.values()] == [[i] for i in ids]
        for job_id in ids[:20]:
            record = await get_job(cluster_redis, keys, job_id, partitions=PARTITIONS)
            assert record is not None and record.status == "queued", job_id
        lanes = [await cluster_redis.xlen(keys.in_partition(p).lane("normal")) for p in range(PARTITIONS)]
        assert lanes == [sum(partition_of(i, PARTITIONS) == p for i in ids) for p in range(PARTITIONS)]

        # Results of every partition -> send, XACKed in their own partition; a malformed entry (a raw XADD) in
        # partition 1 is dead-lettered there, its letter, guard and ack in one script call on that partition's shard
        await cluster_redis.xadd(keys.in_partition(1).results, {"id": "broken", "junk": "1"})
        await add_results(cluster_redis, keys, PARTITIONS, ids)
        kafka = Kafka()

        async def all_acked() -> bool:
            states = [await group_state(cluster_redis, keys.in_partition(p).results) for p in range(PARTITIONS)]
            return len(kafka.sent) == JOBS and all(s is not None and s["pending"] == 0 and s["lag"] == 0 for s in states)

        await forward_with_runtime(bridge, kafka, all_acked, f"{JOBS} results sent and XACKed over {PARTITIONS} partitions")
        assert set(kafka.sent) == {i.encode() for i in ids} and max(kafka.sent.values()) == 1
        for job_id in ids:
            assert kafka.streams[job_id.encode()] == keys.in_partition(partition_of(job_id, PARTITIONS)).results
        (letter,) = [f for _, f in await cluster_redis.xrange(keys.in_partition(1).dead)]
        assert (letter["id"], letter["reason"], letter["source_stream"]) == ("broken", "invalid", keys.in_partition(1).results)
    finally:
        shutil.rmtree(bridge.datadir, ignore_errors=True)
