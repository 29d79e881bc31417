"""Operator commands and endpoints on a real Redis Cluster with 6 partitions (contract §10): retries end in
dead letters of several partitions, which `streamcrew dead` and the gateway list, replay and count;
`stats`, `watch` and `submit --wait` cover every partition; SIGTERM drains a worker of every partition;
the scraped gauges read every partition through a cluster client."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from pathlib import Path

from prometheus_client import CollectorRegistry
from redis.asyncio import Redis

from consumers.processes import streamcrew_cmd
from streams.dead import count_dead
from streams.envelope import JobRequest
from streams.gauges import StreamGauges
from streams.keys import Keys, partition_keys
from streams.producer import Producer
from streams.records import get_job
from tests.cluster.conftest import PARTITIONS
from tests.cluster.test_workers import all_results, keys_of, wait_all_results
from tests.cluster_support import LocalCluster
from tests.consumers.gateway.support import GatewayFactory
from tests.streams.test_gauges import _values
from tests.support import wait_until

ENV = {"STREAMCREW_PARTITIONS": str(PARTITIONS)}


def cli(cluster: LocalCluster, prefix: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``streamcrew <args>`` against the cluster (the CLI detects it from the server) with 6 partitions."""
    done = subprocess.run(streamcrew_cmd(*args, "--redis-url", cluster.url, "--prefix", prefix), capture_output=True,
                          text=True, timeout=60, env={**os.environ, **ENV})
    assert done.returncode in (0, 1), f"streamcrew {' '.join(args)} exited {done.returncode}:\n{done.stderr[-2000:]}"
    return done


async def test_dead_letters_of_every_partition_replay_by_cli_and_http(
    cluster: LocalCluster, cluster_redis: Redis, cluster_prefix: str, cluster_workers, tmp_path: Path,
) -> None:
    keys = Keys(cluster_prefix)
    producer = Producer(cluster_redis, keys, partitions=PARTITIONS)
    doomed = [f"doom-{i}" for i in range(12)]
    # Given 12 jobs that fail both of their 2 attempts (spread over the partitions) and 12 that succeed
    await producer.publish_many([JobRequest(agent="echo", data={"fail_first": 2}, id=j, max_attempts=2) for j in doomed])
    await producer.publish_many([JobRequest(agent="echo", data={}, id=f"ok-{i}") for i in range(12)])
    assert len({keys_of(j) for j in doomed}) >= 4
    cluster_workers.start("--concurrency", "50")
    await wait_all_results(cluster_redis, keys, 24, timeout=40)
    assert await count_dead(cluster_redis, keys, partitions=PARTITIONS) == 12

    # Then `dead list` shows the 12, named by partition, from several partitions; `stats` sums them
    letters = [json.loads(line) for line in cli(cluster, cluster_prefix, "dead", "list", "--json").stdout.splitlines()]
    assert sorted(d["id"] for d in letters) == sorted(doomed)
    assert all(d["attempts"] == 2 for d in letters), letters
    assert len({d["entry_id"].rsplit(":", 1)[1] for d in letters}) >= 4
    figures = json.loads(cli(cluster, cluster_prefix, "stats", "--json").stdout)
    assert figures["dead_letters"] == 12 and figures["results"]["length"] == 24
    assert (figures["window"]["results"], figures["completed"], figures["failed"]) == (24, 12, 12)
    assert len(figures["partitions"]) == PARTITIONS

    # When two are replayed by the CLI, one by HTTP by name, and the rest by HTTP in bulk
    by_cli = [letters[0]["entry_id"], next(d["entry_id"] for d in letters if d["entry_id"][-1] != letters[0]["entry_id"][-1])]
    replayed = json.loads(cli(cluster, cluster_prefix, "dead", "replay", *by_cli).stdout)
    assert replayed["skipped"] == [] and len(replayed["replayed"]) == 2
    gateways = GatewayFactory(cluster.url, cluster_prefix, tmp_path)
    try:
        gateway = await gateways.start(ENV)
        async with gateway.client() as client:
            first = (await client.get("/dead", params={"count": 6})).json()
            assert "next_after" in first, first
            second = (await client.get("/dead", params={"count": 6, "after": first["next_after"]})).json()
            listed = first["dead_letters"] + second["dead_letters"]
            assert len(listed) == 10 and len({d["entry_id"] for d in listed}) == 10 and second["next_after"] is None
            one = await client.post(f"/dead/{listed[0]['entry_id']}/replay")
            assert one.status_code == 202, one.text
            bulk = await client.post("/dead/replay")
            assert bulk.status_code == 202 and len(bulk.json()["replayed"]) == 9 and bulk.json()["skipped"] == [], bulk.text
            # Then every replayed job runs again (attempt 3 succeeds) and no dead letter is left
            got = await wait_all_results(cluster_redis, keys, 36, timeout=40)
            stats = (await client.get("/queue/stats")).json()
    finally:
        gateways.close()
    assert stats["dead_letters"] == 0 and stats["results"]["length"] == 36
    for job_id in doomed:
        record = await get_job(cluster_redis, keys, job_id, partitions=PARTITIONS)
        assert record is not None and (record.status, record.attempts) == ("completed", 3), (job_id, record)
    assert sorted(r.id for r in got if r.status == "failed") == sorted(doomed)

    # And `watch` follows the results of every partition, `submit --wait` finds its job's partition
    watched = [json.loads(line)["id"] for line in cli(cluster, cluster_prefix, "watch", "--from-start", "--count", "36").stdout.splitlines()]
    assert sorted(watched) == sorted(r.id for r in got)
    waited = json.loads(cli(cluster, cluster_prefix, "submit", "echo", "--data", '{"q": 1}', "--wait", "--timeout", "20").stdout)
    assert waited["status"] == "completed" and waited["result"] == {"echo": {"q": 1}}


async def test_sigterm_drains_a_worker_of_every_partition(
    cluster: LocalCluster, cluster_redis: Redis, cluster_prefix: str, cluster_workers,
) -> None:
    keys = Keys(cluster_prefix)
    producer = Producer(cluster_redis, keys, partitions=PARTITIONS)
    short, long = [f"short-{i}" for i in range(12)], [f"long-{i}" for i in range(12)]
    # Given a worker with a 3 s grace running short and long jobs of every partition
    worker = cluster_workers.start("--concurrency", "24", "--grace", "3", "--lease", "30")
    await producer.publish_many([JobRequest(agent="echo", data={"sleep_s": 1}, id=j) for j in short])
    await producer.publish_many([JobRequest(agent="echo", data={"sleep_s": 60}, id=j) for j in long])
    assert {keys_of(j) for j in long} == set(range(PARTITIONS))

    async def all_running() -> bool:
        records = [await get_job(cluster_redis, keys, j, partitions=PARTITIONS) for j in short + long]
        return all(r is not None and r.status == "running" for r in records)

    await wait_until(all_running, timeout=20, what="24 jobs running")
    # When it gets SIGTERM
    t0 = time.monotonic()
    worker.terminate()
    code = await asyncio.to_thread(worker.wait, 15)
    # Then it exits within the grace, the short jobs done and the long ones handed back to their partitions
    assert code == 0, worker.log_text()[-2000:]
    assert time.monotonic() - t0 < 3 + 3
    assert "12 in-flight jobs finished, 12 handed back" in worker.log_text()
    assert sorted(r.id for r in await all_results(cluster_redis, keys)) == sorted(short)
    for job_id in long:
        record = await get_job(cluster_redis, keys, job_id, partitions=PARTITIONS)
        assert record is not None and record.status == "queued", (job_id, record)
    pending = [int((await cluster_redis.xpending(k.lane("normal"), "workers"))["pending"]) for k in partition_keys(keys, PARTITIONS)]
    assert pending == [0] * PARTITIONS
    # And the scraped gauges (a sync cluster client) report each partition: the sums match
    registry = CollectorRegistry()
    registry.register(StreamGauges(cluster.url, keys, partitions=PARTITIONS, cache_s=0))
    values = _values(registry)
    results = {labels: v for (name, labels), v in values.items() if name == "streamcrew_stream_length" and ("stream", "results") in labels}
    assert sorted(dict(labels)["partition"] for labels in results) == [str(p) for p in range(PARTITIONS)]
    assert sum(results.values()) == len(short)
    assert sum(v for (name, labels), v in values.items()
               if name == "streamcrew_group_pending" and ("stream", "normal") in labels) == 0
