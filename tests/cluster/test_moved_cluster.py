"""A whole cluster restarted on new addresses (every pod rescheduled at once, a compose project brought down and up)
is found again under the name the processes were given (streams.cluster_client.StreamsCluster._refresh_topology). Before,
a process knew the nodes only by the addresses the cluster had named, asked those until it was restarted, and served
nothing meanwhile, while its /metrics (the liveness probe of deploy/k8s) still answered."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from streams.connection import connect_detected
from streams.envelope import JobRequest
from streams.keys import Keys
from streams.producer import Producer
from tests.cluster.conftest import PARTITIONS
from tests.cluster.test_seeds import resolved_in, results_counted
from tests.cluster.test_workers import wait_all_results
from tests.cluster_support import LocalCluster, placed_cluster
from tests.support import WorkerFactory, wait_until, with_hosts

NEW_HOST = "127.0.0.2"  # loopback too: the whole of 127/8 answers on Linux


@pytest.fixture
def moving_cluster() -> Iterator[LocalCluster]:
    """A cluster of its own (three masters, no replicas: what moves is every node), since the test moves it."""
    with placed_cluster(PARTITIONS, size=3, replicas=0) as local:
        yield local


async def test_processes_find_a_cluster_restarted_on_new_addresses_under_its_name(moving_cluster: LocalCluster, tmp_path: Path) -> None:
    # Given one name for the cluster's nodes (deploy/'s Service, a compose alias), a worker started with it
    hosts = tmp_path / "hosts"
    hosts.write_text(f"127.0.0.1 localhost\n{moving_cluster.host} nodes.test\n")
    if (wrapper := with_hosts(hosts)) is None:
        pytest.skip("needs root and unshare(1) for an /etc/hosts of the test's own")
    prefix = f"c{uuid.uuid4().hex[:12]}"
    keys = Keys(prefix)
    url = f"redis://nodes.test:{moving_cluster.ports[0]}/0"
    workers = WorkerFactory(url, prefix, tmp_path, env={"STREAMCREW_PARTITIONS": str(PARTITIONS)}, wrapper=wrapper)
    try:
        worker, metrics_port = workers.start_serving_metrics("--concurrency", "20")

        async def counted(n: int) -> bool:
            return await results_counted(metrics_port) == n

        before = await connect_detected(moving_cluster.url)
        try:
            await Producer(before, keys, partitions=PARTITIONS).publish_many(
                [JobRequest(agent="echo", data={"i": i}, id=f"before-{i}") for i in range(30)])
            await wait_all_results(before, keys, 30, timeout=40)
            await wait_until(lambda: counted(30), timeout=10, what="the results gauges of every partition to sum to 30")
        finally:
            await before.aclose()

        # When every node is restarted, data kept, on an address none of them had, and the name follows them
        moving_cluster.move_to(NEW_HOST)
        hosts.write_text(f"127.0.0.1 localhost\n{NEW_HOST} nodes.test\n")  # in place: the worker's /etc/hosts is this file
        assert resolved_in(wrapper, "nodes.test") == [NEW_HOST]

        # Then the same worker, not restarted, runs the jobs published after the move in every partition
        after = await connect_detected(moving_cluster.url)
        try:
            await Producer(after, keys, partitions=PARTITIONS).publish_many(
                [JobRequest(agent="echo", data={"i": i}, id=f"after-{i}") for i in range(30)])
            got = await wait_all_results(after, keys, 60, timeout=60)
            assert sorted(r.id for r in got) == sorted([f"before-{i}" for i in range(30)] + [f"after-{i}" for i in range(30)])
            assert worker.alive(), worker.log_text()[-3000:]

            # And its /metrics gauges (a client of their own, made before the move) read the moved cluster too
            await wait_until(lambda: counted(60), timeout=30, what="the results gauges of every partition to sum to 60 after the move")
        finally:
            await after.aclose()
    finally:
        workers.close()
