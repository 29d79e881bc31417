"""The local cluster itself: six live nodes, three masters, partitions placed two per master."""

from __future__ import annotations

import socket

import pytest
from redis.crc import key_slot

from tests import cluster_support
from tests.cluster.conftest import PARTITIONS
from tests.cluster_support import LocalCluster, cluster_binaries


def test_three_masters_with_a_replica_each(cluster: LocalCluster) -> None:
    masters = cluster.masters()
    assert len(masters) == 3, masters
    assert sum(b - a + 1 for ranges in masters.values() for a, b in ranges) == 16384
    with cluster.client(cluster.ports[0]) as c:
        nodes = c.execute_command("CLUSTER", "NODES")
    text = nodes if isinstance(nodes, str) else str(nodes)
    assert text.count("slave") == 3 or sum(1 for v in (nodes.values() if isinstance(nodes, dict) else []) if "slave" in v["flags"]) == 3, text


def test_partitions_spread_two_per_master(cluster: LocalCluster) -> None:
    owners = [cluster.master_of_slot(key_slot(f"{{{p}}}".encode())) for p in range(PARTITIONS)]
    assert sorted(owners.count(m) for m in set(owners)) == [2, 2, 2], owners


def test_nodes_whose_port_or_bus_port_is_taken_before_they_bind_get_new_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any process's connection can take a free port (or the bus port, +10000) between the harness finding it and
    the node binding it: the node then exits, and the cluster starts with a new port for it, not a test error."""
    binaries = cluster_binaries()
    if binaries is None:
        pytest.skip("needs redis-server and redis-cli on PATH")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as on_port, socket.socket(socket.AF_INET, socket.SOCK_STREAM) as on_bus:
        first = cluster_support.cluster_port()
        second = cluster_support.cluster_port([first])
        on_port.bind(("127.0.0.1", first))
        on_bus.bind(("127.0.0.1", second + cluster_support.BUS_OFFSET))
        for s in (on_port, on_bus):
            s.listen()
        found = iter([first, second])
        real = cluster_support.cluster_port
        monkeypatch.setattr(cluster_support, "cluster_port", lambda *taken: next(found, None) or real(*taken))
        local = LocalCluster(*binaries, size=3, replicas=0)
        try:
            local.start()
            assert first not in local.ports and second not in local.ports, local.ports
            assert len(local.masters()) == 3
        finally:
            local.close()
