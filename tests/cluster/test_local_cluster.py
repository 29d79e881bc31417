"""The local cluster itself: six live nodes, three masters, partitions placed two per master."""

from __future__ import annotations

from redis.crc import key_slot

from tests.cluster.conftest import PARTITIONS
from tests.cluster_support import LocalCluster


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
