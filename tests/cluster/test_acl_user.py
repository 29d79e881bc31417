"""The least-privilege Redis user of docs/operations.md ("A Redis user of its own": the prefix's keys, no channels,
nothing ``@dangerous``) on a Redis Cluster: every process runs with it, once it exists on every node (a node's
users are its own: ACL SETUSER is not replicated or spread over the cluster)."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from consumers.processes import streamcrew_cmd
from tests.cluster.conftest import PARTITIONS
from tests.cluster_support import LocalCluster
from tests.consumers.gateway.support import GatewayFactory
from tests.support import ACL_PASSWORD, WorkerFactory

ENV = {"STREAMCREW_PARTITIONS": str(PARTITIONS)}


@pytest.fixture
def cluster_user(cluster: LocalCluster, cluster_prefix: str) -> Iterator[str]:
    """A user of the prefix's keys only, made on every node; its URL lists every node (streams.seeds)."""
    user = f"u-{uuid.uuid4().hex[:10]}"
    for port in cluster.alive_ports():
        with cluster.client(port) as admin:
            admin.execute_command("ACL", "SETUSER", user, "on", f">{ACL_PASSWORD}", f"~{cluster_prefix}:*", "resetchannels", "+@all", "-@dangerous")
    yield cluster.listed_url(f"{user}:{ACL_PASSWORD}@")
    for port in cluster.alive_ports():
        with cluster.client(port) as admin:
            admin.execute_command("ACL", "DELUSER", user)


def cli(url: str, prefix: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(streamcrew_cmd(*args, "--redis-url", url, "--prefix", prefix), capture_output=True, text=True,
                          timeout=60, env={**os.environ, **ENV})


async def test_every_process_runs_as_a_user_of_the_prefix_only(cluster_user: str, cluster_prefix: str, tmp_path: Path) -> None:
    workers, gateways = WorkerFactory(cluster_user, cluster_prefix, tmp_path, env=ENV), GatewayFactory(cluster_user, cluster_prefix, tmp_path)
    try:
        # Given a worker running as that user, then a job the CLI submits and waits for completes
        worker = workers.start()
        done = cli(cluster_user, cluster_prefix, "submit", "echo", "--data", '{"acl": 1}', "--wait", "--timeout", "20")
        assert done.returncode == 0 and json.loads(done.stdout)["status"] == "completed", done.stderr[-2000:]
        stats = cli(cluster_user, cluster_prefix, "stats", "--json")
        assert stats.returncode == 0 and len(json.loads(stats.stdout)["partitions"]) == PARTITIONS, stats.stderr[-2000:]
        # And the gateway serves, its stream gauges (a sync cluster client of their own) included
        gateway = await gateways.start(ENV)
        async with gateway.client() as client:
            assert (await client.get("/readyz")).status_code == 200
            assert (await client.get("/queue/stats")).status_code == 200
            metrics = (await client.get("/metrics")).text
        assert 'streamcrew_stream_length{partition="5"' in metrics, metrics[:500]
        logs = gateway.child.log_text() + worker.log_text()
        assert "Redis unavailable" not in logs and "Traceback" not in logs, logs[-3000:]
        assert ACL_PASSWORD not in logs
    finally:
        gateways.close()
        workers.close()
