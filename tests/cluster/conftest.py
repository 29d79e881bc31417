"""One real Redis Cluster (3 masters + 3 replicas) per test session; a unique key prefix per test."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from streams.connection import connect_detected
from tests.cluster_support import LocalCluster, placed_cluster
from tests.consumers.notifier.conftest import NotifierFactory, make_secret, receiver  # noqa: F401 - the receiver fixture, for the notifier tests
from tests.support import WorkerFactory

PARTITIONS = 6


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    with placed_cluster(PARTITIONS) as local:
        yield local


@pytest.fixture
def cluster_prefix() -> str:
    return f"c{uuid.uuid4().hex[:12]}"


@pytest.fixture
def cluster_workers(cluster: LocalCluster, cluster_prefix: str, tmp_path: Path) -> Iterator[WorkerFactory]:
    """Worker processes on the cluster with ``STREAMCREW_PARTITIONS`` set."""
    factory = WorkerFactory(cluster.url, cluster_prefix, tmp_path, env={"STREAMCREW_PARTITIONS": str(PARTITIONS)})
    yield factory
    factory.close()


@pytest.fixture
def cluster_notifiers(cluster: LocalCluster, cluster_prefix: str, tmp_path: Path) -> Iterator[NotifierFactory]:
    """Notifier processes on the cluster (start them with ``env={"STREAMCREW_PARTITIONS": ...}``)."""
    factory = NotifierFactory(cluster.url, cluster_prefix, tmp_path, make_secret())
    yield factory
    factory.close()


@pytest.fixture
async def cluster_redis(cluster: LocalCluster) -> AsyncIterator[Redis]:
    client = await connect_detected(cluster.url)
    yield client
    await client.aclose()


def pytest_itemcollected(item: pytest.Item) -> None:
    """With pytest-xdist's ``--dist loadgroup`` the cluster tests share one worker, one cluster, in file order.
    Marked as each is collected: xdist's ``pytest_collection_modifyitems`` names a test's group from this marker and
    ran before one here, so the cluster tests were spread over the workers, several local clusters at once (pytest
    9.2 loses the group too: pyproject.toml keeps it below)."""
    if "tests/cluster/" in str(item.path).replace("\\", "/"):
        item.add_marker(pytest.mark.xdist_group("cluster"))
