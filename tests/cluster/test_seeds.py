"""A Redis URL that lists several cluster nodes (streams.seeds, docs/operations.md "Failover"): a process starts
from the first listed node that answers, so a node that is down, or gone for good after a failover, keeps no
worker, CLI command or /metrics scrape from starting. Before, a URL named one node and a process started while
it was down waited for it. A name that resolves to several nodes is asked the same way, address by address
(streams.addresses)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from redis.asyncio import Redis

from consumers.processes import streamcrew_cmd
from streams.connection import CLUSTER_SOCKET_TIMEOUT_S, NEXT_SEED_AFTER_S, SOCKET_TIMEOUT_S, cluster_enabled, connect_detected
from streams.envelope import JobRequest
from streams.gauges import StreamGauges
from streams.keys import Keys
from streams.producer import Producer
from tests.cluster.conftest import PARTITIONS
from tests.cluster.test_workers import wait_all_results
from tests.cluster_support import LocalCluster
from tests.consumers.test_metrics import _samples
from tests.support import WorkerFactory, silent_listener, silent_ports, wait_until, with_hosts


async def scraped(metrics_port: int) -> dict:
    """A process's /metrics samples, by (name, labels)."""
    async with httpx.AsyncClient() as client:
        return _samples((await client.get(f"http://127.0.0.1:{metrics_port}/metrics")).text)


async def results_counted(metrics_port: int) -> float:
    """The results streams' lengths summed over every partition, as a process's /metrics gauges report them."""
    return sum(v for (name, labels), v in (await scraped(metrics_port)).items()
               if name == "streamcrew_stream_length" and ("stream", "results") in labels)


def listing(cluster: LocalCluster, dead_port: int) -> str:
    """A URL listing a node that refuses every connection first, then two live nodes of the cluster."""
    live = ",".join(f"127.0.0.1:{port}" for port in cluster.alive_ports()[-2:])
    return f"redis://127.0.0.1:{dead_port},{live}/0"


async def test_worker_cli_and_gauges_start_past_a_listed_node_that_is_down(
    cluster: LocalCluster, cluster_redis: Redis, cluster_prefix: str, tmp_path: Path, refusing_port: int,
) -> None:
    url = listing(cluster, refusing_port)
    keys = Keys(cluster_prefix)
    workers = WorkerFactory(url, cluster_prefix, tmp_path, env={"STREAMCREW_PARTITIONS": str(PARTITIONS)})
    try:
        # Given a worker whose URL lists a node that is down before the live ones
        worker, metrics_port = workers.start_serving_metrics("--concurrency", "20")
        # When jobs of every partition arrive
        await Producer(cluster_redis, keys, partitions=PARTITIONS).publish_many(
            [JobRequest(agent="echo", data={"i": i}, id=f"seeded-{i}") for i in range(60)])
        # Then it runs them all, reading every partition through the cluster it learnt from a live node
        got = await wait_all_results(cluster_redis, keys, 60, timeout=40)
        assert sorted(r.id for r in got) == sorted(f"seeded-{i}" for i in range(60))

        # And its /metrics gauges (a client of their own, made at the first scrape) read every partition
        async def counted() -> bool:
            return await results_counted(metrics_port) == 60

        await wait_until(counted, timeout=10, what="the results gauges of every partition to sum to 60")
        lengths = [labels for (name, labels), _ in (await scraped(metrics_port)).items()
                   if name == "streamcrew_stream_length" and ("stream", "results") in labels]
        assert sorted(dict(labels)["partition"] for labels in lengths) == [str(p) for p in range(PARTITIONS)]
        assert worker.alive(), worker.log_text()[-2000:]
    finally:
        workers.close()

    # And the CLI, given the same list, finds every partition's results
    stats = subprocess.run(streamcrew_cmd("stats", "--json", "--redis-url", url, "--prefix", cluster_prefix),
                           capture_output=True, text=True, timeout=60, env={**os.environ, "STREAMCREW_PARTITIONS": str(PARTITIONS)})
    assert stats.returncode == 0, stats.stderr[-2000:]
    assert json.loads(stats.stdout)["results"]["length"] == 60


@pytest.fixture
def silent_port() -> Iterator[int]:
    with silent_ports(1) as (port,):
        yield port


async def test_a_listed_node_that_hangs_is_passed_over_after_a_second(cluster: LocalCluster, silent_port: int) -> None:
    # Given a URL listing a node that never answers before a live one
    url = f"redis://127.0.0.1:{silent_port},127.0.0.1:{cluster.alive_ports()[-1]}/0"
    started = time.monotonic()
    # Then the cluster is found from the live one, asked once the silent one (asked first) kept quiet for a second:
    # not after the silent one's 5 s socket timeout, as when the listed nodes were asked strictly in turn
    assert await cluster_enabled(url)
    waited = time.monotonic() - started
    assert NEXT_SEED_AFTER_S * 0.9 <= waited < CLUSTER_SOCKET_TIMEOUT_S / 2, f"the probe passed over the silent node after {waited:.1f} s"


async def test_the_cluster_client_starts_from_the_node_that_answered_not_from_a_listed_one_that_hangs(cluster: LocalCluster) -> None:
    # Given a live node listed first and five that never answer after it
    with silent_ports(5) as silent:
        url = "redis://" + ",".join(f"127.0.0.1:{p}" for p in [cluster.alive_ports()[-1], *silent]) + "/0"
        started = time.monotonic()
        # When a process connects (the probe, then the cluster client learning the slot map)
        client = await connect_detected(url)
        waited = time.monotonic() - started
        try:
            # Then it is ready at once: the client starts from the node that answered (redis-py, given the list, asks
            # the listed nodes in a random order and waits out each silent one it meets first: 5 times in 6)
            assert waited < CLUSTER_SOCKET_TIMEOUT_S, f"connected after {waited:.1f} s"
            assert await client.set(f"seeds-{time.time_ns()}", "1", ex=10)
            # And it knows the cluster's nodes, none of the silent ones
            known = {node.port for node in client.get_nodes()}  # type: ignore[attr-defined]
            assert set(cluster.masters()) <= known <= set(cluster.alive_ports()), known
        finally:
            await client.aclose()


def test_the_metrics_gauges_start_from_the_node_that_answers_not_from_a_listed_one_that_hangs(
    cluster: LocalCluster, cluster_prefix: str,
) -> None:
    # Given /metrics gauges whose URL lists a live node first and five that never answer after it
    with silent_ports(5) as silent:
        url = "redis://" + ",".join(f"127.0.0.1:{p}" for p in [cluster.alive_ports()[-1], *silent]) + "/0"
        gauges = StreamGauges(url, Keys(cluster_prefix), partitions=PARTITIONS)
        # When they are scraped the first time (their client made then)
        started = time.monotonic()
        families = list(gauges.collect())
        waited = time.monotonic() - started
        # Then they read every partition at once: from the node that answered (before, redis-py was given the list,
        # asked the nodes in a random order and waited out a silent one's 2 s in most first scrapes)
        lengths = [s for f in families if f.name == "streamcrew_stream_length" for s in f.samples if s.labels["stream"] == "results"]
        assert sorted(s.labels["partition"] for s in lengths) == [str(p) for p in range(PARTITIONS)], families
        assert waited < 2, f"first scrape took {waited:.1f} s"


def resolved_in(wrapper: list[str], name: str) -> list[str]:
    """The addresses ``name`` resolves to, in order, under ``wrapper``'s /etc/hosts."""
    code = f"import socket; print(' '.join(dict.fromkeys(i[4][0] for i in socket.getaddrinfo({name!r}, 1, type=socket.SOCK_STREAM))))"
    done = subprocess.run([*wrapper, sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()


async def test_a_name_that_resolves_to_every_node_starts_processes_past_a_node_that_hangs(
    cluster: LocalCluster, cluster_redis: Redis, cluster_prefix: str, tmp_path: Path,
) -> None:
    # Given one name for the cluster's nodes, as deploy/'s Service and compose alias are, whose first address is a node
    # that hangs (takes connections, never answers) and whose second is a live node
    port = cluster.alive_ports()[-1]
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n::1 nodes.test\n127.0.0.1 nodes.test\n")
    if (wrapper := with_hosts(hosts)) is None:
        pytest.skip("needs root and unshare(1) for an /etc/hosts of the test's own")
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(silent_listener("::1", port))
        except OSError as exc:
            pytest.skip(f"needs IPv6 on loopback for the address that hangs: {exc}")
        assert resolved_in(wrapper, "nodes.test") == ["::1", "127.0.0.1"], "the resolver must give the hung address first"
        url = f"redis://nodes.test:{port}/0"
        keys = Keys(cluster_prefix)
        workers = WorkerFactory(url, cluster_prefix, tmp_path, env={"STREAMCREW_PARTITIONS": str(PARTITIONS)}, wrapper=wrapper)
        try:
            # When a worker starts: before, its start asked the name, met the hung address first every time and never
            # got past it ("Redis unavailable (TimeoutError: Timeout reading from nodes.test:...)", not ready in 90 s)
            started = time.monotonic()
            worker, metrics_port = workers.start_serving_metrics("--concurrency", "20")  # returned once ready
            ready_s = time.monotonic() - started
            # Then it serves every partition through the cluster it learnt from the live address
            await Producer(cluster_redis, keys, partitions=PARTITIONS).publish_many(
                [JobRequest(agent="echo", data={"i": i}, id=f"named-{i}") for i in range(30)])
            got = await wait_all_results(cluster_redis, keys, 30, timeout=40)
            assert sorted(r.id for r in got) == sorted(f"named-{i}" for i in range(30))
            assert "cannot reach" not in worker.log_text().lower(), worker.log_text()[-3000:]

            # And its /metrics gauges (a client of their own, made at the first scrape) read every partition
            async def counted() -> bool:
                return await results_counted(metrics_port) == 30

            await wait_until(counted, timeout=10, what="the results gauges of every partition to sum to 30")
        finally:
            workers.close()

        # And a one-shot command given the name answers well within the socket timeout it used to wait out
        started = time.monotonic()
        stats = subprocess.run([*wrapper, *streamcrew_cmd("stats", "--json", "--redis-url", url, "--prefix", cluster_prefix)],
                               capture_output=True, text=True, timeout=120, env={**os.environ, "STREAMCREW_PARTITIONS": str(PARTITIONS)})
        waited = time.monotonic() - started
        assert stats.returncode == 0, stats.stderr[-2000:]
        assert json.loads(stats.stdout)["results"]["length"] == 30
        assert waited < SOCKET_TIMEOUT_S, f"stats answered after {waited:.1f} s (the worker was ready after {ready_s:.1f} s)"
