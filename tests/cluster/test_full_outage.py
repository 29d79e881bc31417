"""Every node of a Redis Cluster down at once, then back (a whole cluster restarted, a power cut): the worker and
the gateway and the notifier ride it out like a single Redis's outage. Before, the cluster client's "no node answers"
(RedisClusterUnreachableError) was no outage to the loops: each pass logged an unexpected error with a traceback,
and redis-py logged "Topology refresh failed" on every retry. A cluster of its own (3 masters, no replicas): the
session's is shared by the other cluster tests."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from streams.connection import connect_detected
from streams.envelope import JobRequest
from streams.keys import Keys
from streams.producer import Producer
from tests.cluster.conftest import PARTITIONS
from tests.cluster.test_workers import wait_all_results
from tests.cluster.test_notifier import wait_every_webhook
from tests.cluster_support import LocalCluster, placed_cluster
from tests.consumers.notifier.conftest import NotifierFactory, make_secret
from tests.consumers.notifier.receiver import Receiver
from tests.consumers.gateway.support import GatewayFactory
from tests.support import WorkerFactory, wait_for_log, wait_until

ENV = {"STREAMCREW_PARTITIONS": str(PARTITIONS)}


@pytest.fixture
def bare_cluster() -> Iterator[LocalCluster]:
    with placed_cluster(PARTITIONS, size=3, replicas=0) as local:
        yield local


@pytest.fixture
def hooks() -> Iterator[Receiver]:
    """A loopback webhook receiver."""
    receiver = Receiver().start()
    yield receiver
    receiver.stop()


async def test_every_node_down_then_back_is_an_outage_ridden_out(bare_cluster: LocalCluster, tmp_path: Path, hooks: Receiver) -> None:
    url = bare_cluster.listed_url()
    prefix = f"c{uuid.uuid4().hex[:12]}"
    keys = Keys(prefix)
    workers, gateways = WorkerFactory(url, prefix, tmp_path, env=ENV), GatewayFactory(url, prefix, tmp_path)
    notifiers = NotifierFactory(url, prefix, tmp_path, make_secret())
    hook = hooks.url("/hook")
    try:
        # Given a worker, a gateway and a notifier that served jobs of every partition
        worker = workers.start("--concurrency", "20")
        gateway = await gateways.start(ENV)
        notifier = notifiers.start(env=ENV)
        redis = await connect_detected(url)
        await Producer(redis, keys, partitions=PARTITIONS).publish_many(
            [JobRequest(agent="echo", data={}, id=f"before-{i}", webhook=hook) for i in range(30)])
        await wait_all_results(redis, keys, 30, timeout=30)
        await wait_every_webhook(hooks, {f"before-{i}" for i in range(30)}, timeout=30)
        await redis.aclose()

        # When every node of the cluster goes down
        for port in bare_cluster.ports:
            bare_cluster.kill(port)
        # Then the worker and the notifier say so, once per loop, and the gateway answers 503 (Redis unavailable)
        for child in (worker, notifier):
            await asyncio.to_thread(wait_for_log, child, "read: Redis unavailable (", timeout=30)
        async with gateway.client() as client:
            down = [await client.get(f"/jobs/before-{i}") for i in range(5)]  # each one retries the cluster's topology
        assert [r.status_code for r in down] == [503] * 5, down[-1].text

        # When the cluster comes back (these nodes keep no data: it is empty)
        bare_cluster.restart_all()
        redis = await connect_detected(url)
        await Producer(redis, keys, partitions=PARTITIONS).publish_many(
            [JobRequest(agent="echo", data={}, id=f"after-{i}", webhook=hook) for i in range(30)])
        # Then the same worker runs the new jobs (its groups made again), the same notifier delivers their webhooks,
        # and the gateway answers for them
        got = await wait_all_results(redis, keys, 30, timeout=60)
        assert sorted(r.id for r in got) == sorted(f"after-{i}" for i in range(30))
        await wait_every_webhook(hooks, {f"after-{i}" for i in range(30)}, timeout=60)
        await redis.aclose()

        async def answered() -> bool:
            async with gateway.client() as client:
                return (await client.get("/jobs/after-0")).status_code == 200

        await wait_until(answered, timeout=20, what="the gateway to answer for a job run after the restart")
        assert worker.alive() and gateway.child.alive() and notifier.alive()
        # And the outage was told as one, without tracebacks
        for log in (worker.log_text(), notifier.log_text()):
            assert "Traceback" not in log and "unexpected error" not in log, log[-4000:]
            assert "read: Redis is back after" in log, log[-4000:]
            assert log.count("Topology refresh failed") <= 1, log[-4000:]
        served = gateway.child.log_text()
        assert "Traceback" not in served and served.count("Topology refresh failed") <= 1, served[-4000:]
    finally:
        workers.close()
        gateways.close()
        notifiers.close()
