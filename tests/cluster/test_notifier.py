"""Worker and notifier processes on a real Redis Cluster with 6 partitions: every job's webhook delivered once, signed."""

from __future__ import annotations

from collections import Counter

from redis.asyncio import Redis
from standardwebhooks import Webhook

from streams.envelope import JobRequest
from streams.keys import NOTIFIER_GROUP, Keys, partition_keys
from streams.producer import Producer
from tests.cluster.conftest import PARTITIONS
from tests.consumers.notifier.conftest import NotifierFactory
from tests.consumers.notifier.receiver import Receiver
from tests.support import WorkerFactory, wait_until

ON_CLUSTER = {"STREAMCREW_PARTITIONS": str(PARTITIONS)}


def webhook_ids(receiver: Receiver) -> Counter[str]:
    return Counter(r.headers["webhook-id"] for r in receiver.on("/hook"))


async def wait_every_webhook(receiver: Receiver, ids: set[str], *, timeout: float) -> Counter[str]:
    """Wait until every id arrived at least once; returns how many times each did."""

    async def arrived() -> bool:
        return set(webhook_ids(receiver)) >= ids

    await wait_until(arrived, timeout=timeout, what=f"{len(ids)} webhooks over {PARTITIONS} partitions")
    return webhook_ids(receiver)


async def notifier_pending(redis: Redis, keys: Keys) -> int:
    return sum([int((await redis.xpending(p.results, NOTIFIER_GROUP))["pending"]) for p in partition_keys(keys, PARTITIONS)])


async def test_every_jobs_webhook_is_delivered_once_over_every_partition(
    cluster_redis: Redis, cluster_prefix: str, cluster_workers: WorkerFactory, cluster_notifiers: NotifierFactory, receiver: Receiver,
) -> None:
    keys = Keys(cluster_prefix)
    producer = Producer(cluster_redis, keys, partitions=PARTITIONS)
    # Given a worker and a notifier serving the 6 partitions of the 3-master cluster
    cluster_workers.start("--concurrency", "50")
    cluster_notifiers.start("--lease", "5", env=ON_CLUSTER)
    # When 300 jobs with a webhook run, spread over every partition
    requests = [JobRequest(agent="echo", data={"i": i}, id=f"w-{i}", webhook=receiver.url("/hook")) for i in range(300)]
    await producer.publish_many(requests)
    # Then each job's webhook arrives exactly once, signed, and every results entry is acknowledged in its partition
    got = await wait_every_webhook(receiver, {r.id for r in requests if r.id}, timeout=45)
    assert max(got.values()) == 1, [i for i, n in got.items() if n > 1]
    for hit in receiver.requests:
        assert Webhook(cluster_notifiers.secret).verify(hit.body, hit.headers)["status"] == "completed"

    async def all_acked() -> bool:
        return await notifier_pending(cluster_redis, keys) == 0

    await wait_until(all_acked, timeout=10, what="every results entry acknowledged by the notifier")
