"""Resharding under load: a partition's slot moves to another master, key by key, while workers run its jobs
and a notifier delivers their webhooks.

While the slot is half-moved, its keys sit on two masters: Redis answers ASK, TRYAGAIN, or (for a key a
script names itself, such as a job record) "Script attempted to access a non local key". Producers and
workers must treat all of those as "try again shortly": no job lost, none run to two results, no worker
restarted, no webhook lost or sent twice. Named ``zy`` so it runs after the other cluster tests and before the failover ones; it moves
the slot back at the end, so the layout of ``place()`` holds again.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import redis as sync_redis
from redis.asyncio import Redis
from redis.crc import key_slot

from streams.envelope import JobRequest
from streams.keys import Keys, partition_keys, partition_of
from streams.outage import REDIS_DOWN
from streams.producer import Producer
from tests.cluster.conftest import PARTITIONS
from tests.cluster.test_notifier import ON_CLUSTER, wait_every_webhook, webhook_ids
from tests.cluster.test_workers import wait_all_results
from tests.cluster_support import LocalCluster
from tests.consumers.notifier.conftest import NotifierFactory
from tests.consumers.notifier.receiver import Receiver

JOBS = 1200
CHUNK = 40
MOVE_PAUSE_S = 0.005
FILLER_KEYS = 2000  # other keys of the slot, so the move takes a few hundred MIGRATEs while work goes on


def results_so_far(cluster: LocalCluster, keys: Keys) -> int:
    with sync_redis.RedisCluster(host="127.0.0.1", port=cluster.alive_ports()[0]) as c:
        return sum(int(c.xlen(p.results)) for p in partition_keys(keys, PARTITIONS))


async def publish_through_the_move(producer: Producer, jobs: list[JobRequest]) -> int:
    """Publish in chunks, retrying a chunk the cluster cannot take now (ids make a retry harmless); returns retries."""
    retries = 0
    for start in range(0, len(jobs), CHUNK):
        deadline = time.monotonic() + 30
        while True:
            try:
                await producer.publish_many(jobs[start : start + CHUNK])
                break
            except REDIS_DOWN:
                retries += 1
                assert time.monotonic() < deadline, "the cluster refused a publish for 30 s during the move"
                await asyncio.sleep(0.05)
        await asyncio.sleep(0)  # let the workers' results come back between chunks
    return retries


async def test_jobs_survive_a_live_reshard_of_their_partition(
    cluster: LocalCluster, cluster_redis: Redis, cluster_prefix: str, cluster_workers,
    cluster_notifiers: NotifierFactory, receiver: Receiver,
) -> None:
    keys = Keys(cluster_prefix)
    slot = key_slot(b"{0}")
    home = cluster.master_of_slot(slot)
    elsewhere = next(p for p in sorted(cluster.masters()) if p != home)
    producer = Producer(cluster_redis, keys, partitions=PARTITIONS)
    jobs = [JobRequest(agent="echo", data={"i": i}, id=f"move-{i}", webhook=receiver.url("/hook")) for i in range(JOBS)]
    assert sum(partition_of(j.id, PARTITIONS) == 0 for j in jobs) > JOBS // 10, "too few jobs in the moving partition"
    filler = cluster_redis.pipeline(transaction=False)
    for i in range(FILLER_KEYS):
        filler.set(f"{cluster_prefix}:{{0}}:filler:{i}", "x", ex=600)
    await filler.execute()
    workers = [cluster_workers.start("--concurrency", "50") for _ in range(2)]
    notifier = cluster_notifiers.start(env=ON_CLUSTER)
    # Some work is queued and running before the move starts
    await producer.publish_many(jobs[:CHUNK])

    def paced() -> None:
        """An operator's move is not instant: a short pause after each MIGRATE keeps the slot half-moved for a while."""
        time.sleep(MOVE_PAUSE_S)

    # When the partition's slot moves to another master while jobs are published and run
    before = results_so_far(cluster, keys)
    moving = asyncio.create_task(asyncio.to_thread(cluster.migrate_slot, slot, elsewhere, between=paced))
    retries = await publish_through_the_move(producer, jobs[CHUNK:])
    moved = await moving
    during = results_so_far(cluster, keys) - before
    assert moved >= FILLER_KEYS and cluster.master_of_slot(slot) == elsewhere
    assert during > 0, "no job finished while the slot was moving: the other partitions must not wait for it"

    # Then every job has exactly one result, none was dead-lettered, and no worker had to be restarted
    got = await wait_all_results(cluster_redis, keys, JOBS, timeout=120)
    counts = Counter(r.id for r in got)
    assert set(counts) == {j.id for j in jobs}, f"lost: {sorted({j.id for j in jobs} - set(counts))[:10]}"
    assert max(counts.values()) == 1, [i for i, n in counts.items() if n > 1][:10]
    assert all(r.status == "completed" for r in got), Counter(r.status for r in got)
    dead = sum([int(await cluster_redis.xlen(p.dead)) for p in partition_keys(keys, PARTITIONS)])
    assert dead == 0, f"{dead} dead letters"
    assert all(w.alive() for w in workers), [w.log_text()[-2000:] for w in workers if not w.alive()]
    try:
        webhooks = await wait_every_webhook(receiver, {j.id for j in jobs if j.id}, timeout=60)
    except AssertionError as exc:
        missing = {j.id for j in jobs} - set(webhook_ids(receiver))
        raise AssertionError(f"{exc}: {len(missing)} missing, e.g. {sorted(missing)[:5]} (partitions "
                             f"{sorted(Counter(partition_of(i, PARTITIONS) for i in missing).items())}); notifier log:\n"
                             f"{notifier.log_text()[-4000:]}") from None
    assert notifier.alive(), notifier.log_text()[-2000:]
    assert max(webhooks.values()) == 1, [i for i, n in webhooks.items() if n > 1][:10]
    print(f"reshard: {moved} keys moved under load ({during} results meanwhile), "
          f"{retries} publish retries, {JOBS} jobs and webhooks, 0 lost, 0 duplicated")

    # The slot goes home again (an idle move), so later tests find the placed layout
    await asyncio.to_thread(cluster.migrate_slot, slot, home)
