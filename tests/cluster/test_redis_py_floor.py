"""On Redis Cluster with a redis-py older than streamcrew's cluster client needs, a process refuses in one line that says
what to install. Before, it started and served, but a cluster restarted on new addresses was never found again (the
wrapped ``_refresh_topology`` came with redis-py 8.2), and its liveness probe still answered.

The base install allows redis-py 5 for a single Redis, so these run where redis-py is that old:
tests/install/test_floors.py's venv, at the floor (5.0.1); the suite's own venv has a new one and skips them.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
import redis

from consumers.cli_base import Exit
from consumers.processes import streamcrew_cmd
from streams.cluster_client import MIN_REDIS_PY, StreamsCluster, refresh_hook_fits, release_of, require_cluster_redis_py
from streams.errors import ConfigError
from tests.cluster_support import LocalCluster, placed_cluster
from tests.consumers.test_cli import cli

OLD = release_of(redis.__version__) < MIN_REDIS_PY


def test_the_floor_is_checked_by_the_installed_release() -> None:
    # The check reads release numbers, not strings ("8.10" is newer than "8.2")
    with pytest.raises(ConfigError, match=r"needs redis-py >= 8\.2, and this environment has 8\.1\.0; pip install -U"):
        require_cluster_redis_py("8.1.0")
    # (a cluster client class that has the refresh: the floors venv's redis-py 5 has none)
    for newer in ("8.2.0", "8.10.1", "9.0.0b1"):
        require_cluster_redis_py(newer, cluster_class=StreamsCluster)


class _NoRefresh:
    """A cluster client class as a later redis-py might have it: no ``_refresh_topology``."""


class _RenamedRefresh:
    async def _refresh_topology(self, startup_nodes: list[tuple[str, int]] | None = None, failed: str | None = None) -> None:
        """A later redis-py's refresh whose parameters have other names than the ones StreamsCluster passes on."""


class _KeywordRefresh:
    async def _refresh_topology(self, **options: object) -> None:
        """A refresh that takes any keyword: the parameters StreamsCluster passes on still reach it."""


def test_a_redis_py_without_the_refresh_streamcrew_extends_is_refused() -> None:
    # Given redis-py releases past the floor whose cluster client has no slot map refresh of that form,
    # When a process checks, Then it refuses in one line (the override would never run, or fail every refresh)
    for changed in (_NoRefresh, _RenamedRefresh):
        with pytest.raises(ConfigError, match=r"does not have in that form; install the release streamcrew was tested with"):
            require_cluster_redis_py("9.0.0", cluster_class=changed)
    require_cluster_redis_py("9.0.0", cluster_class=_KeywordRefresh)


@pytest.mark.skipif(OLD, reason=f"redis-py {redis.__version__} has no slot map refresh to extend (it is refused by its version)")
def test_the_installed_redis_py_has_the_refresh_streamcrew_extends() -> None:
    # The override passes these parameters on by name; this is where a new redis-py that changed them shows first
    assert refresh_hook_fits()
    require_cluster_redis_py()


@pytest.fixture(scope="module")
def bare_cluster() -> Iterator[LocalCluster]:
    """Three masters, no replicas: the refusal comes before any slot is used."""
    with placed_cluster(3, size=3, replicas=0) as local:
        yield local


@pytest.mark.skipif(not OLD, reason=f"redis-py {redis.__version__} is new enough: this runs in tests/install/test_floors.py's venv")
def test_cli_and_worker_refuse_a_cluster_with_one_line(bare_cluster: LocalCluster, prefix: str) -> None:
    # Given a Redis Cluster and a redis-py before 8.2
    wanted = "needs redis-py >= 8.2, and this environment has " + redis.__version__
    # When the CLI asks it, Then it exits as a usage error, saying what to install
    stats = cli(bare_cluster.url, prefix, "stats", "--json")
    assert stats.returncode == Exit.USAGE and wanted in stats.stderr and "pip install -U" in stats.stderr, stats.stderr
    # And a worker does not start serving (exits at once; its start does not wait it out as an outage)
    worker = subprocess.run(streamcrew_cmd("worker", "--agents", "echo", "--redis-url", bare_cluster.url, "--prefix", prefix),
                            capture_output=True, text=True, timeout=60)
    assert worker.returncode == Exit.USAGE and wanted in worker.stderr, worker.stderr[-2000:]
