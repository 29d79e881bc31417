"""A long-running process started before its Redis waits for it and then serves; a refusal still exits at once.

Before, the worker, the notifier, the gateway and the Kafka bridge exited 4 when Redis was down as they started,
into their supervisor's restart backoff (Kubernetes grows it to 5 minutes), while an outage later was ridden out.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as sync_redis
from redis.asyncio import Redis

from consumers.processes import Child, streamcrew_cmd
from streams.embedded import RedisServer
from streams.keys import Keys
from streams.producer import Producer
from tests.support import WorkerFactory, start_on_drawn_port, wait_for_log, wait_results, wait_serving

WAITING = "start: Redis unavailable (ConnectionError"


@pytest.fixture
def held_port() -> Iterator[socket.socket]:
    """A loopback port bound and never listening (every connection refused) until the test lets go of it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        yield s


def redis_comes_up(binary: str, held: socket.socket) -> RedisServer:
    """Let go of the held port and start a Redis on it at once."""
    port = int(held.getsockname()[1])
    held.close()
    return RedisServer(binary, port=port).start()


async def test_a_worker_started_before_redis_waits_and_then_runs_jobs(redis_binary: str, held_port: socket.socket, tmp_path: Path) -> None:
    # Given a worker started while nothing answers on its Redis port
    url = f"redis://127.0.0.1:{held_port.getsockname()[1]}/0"
    workers = WorkerFactory(url, "early", tmp_path)
    try:
        worker = workers.start(wait_ready=False)
        # Then it says once that it waits, naming the error and not exiting
        wait_for_log(worker, WAITING)
        # When Redis comes up on that port
        server = redis_comes_up(redis_binary, held_port)
        try:
            # Then the worker becomes ready and runs a job
            wait_for_log(worker, " ready: ")
            assert "Redis is back after" in worker.log_text()
            redis = Redis.from_url(server.url, decode_responses=True)
            try:
                keys = Keys("early")
                await Producer(redis, keys).publish("echo", {"hi": 1}, id="after-start")
                (result,) = await wait_results(redis, keys, 1, timeout=30)
                assert (result.id, result.status) == ("after-start", "completed"), result
            finally:
                await redis.aclose()
        finally:
            server.close()
    finally:
        workers.close()


def test_the_notifier_waits_for_redis_too(redis_binary: str, held_port: socket.socket, tmp_path: Path) -> None:
    env = {"STREAMCREW_REDIS_URL": f"redis://127.0.0.1:{held_port.getsockname()[1]}/0", "STREAMCREW_PREFIX": "early",
           "STREAMCREW_METRICS_PORT": "0"}
    notifier = Child(streamcrew_cmd("notifier"), env=env, log_path=tmp_path / "notifier.log")
    server = None
    try:
        wait_for_log(notifier, WAITING)
        server = redis_comes_up(redis_binary, held_port)
        wait_for_log(notifier, " ready: ")
    finally:
        notifier.kill()
        if server is not None:
            server.close()


async def test_the_gateway_waits_for_redis_too(redis_binary: str, held_port: socket.socket, tmp_path: Path) -> None:
    servers: list[RedisServer] = []

    def start(http_port: int) -> Child:
        env = {"STREAMCREW_REDIS_URL": f"redis://127.0.0.1:{held_port.getsockname()[1]}/0", "STREAMCREW_PREFIX": "early",
               "STREAMCREW_PORT": str(http_port)}
        gateway = Child(streamcrew_cmd("gateway"), env=env, log_path=tmp_path / f"gateway-{http_port}.log")
        if not servers:  # the first start waits for Redis; one drawn again (its port was taken) finds it up
            wait_for_log(gateway, WAITING)
            servers.append(redis_comes_up(redis_binary, held_port))
        return gateway

    port_before = held_port.getsockname()[1]
    try:
        gateway, http_port = start_on_drawn_port(start, lambda port: f"Uvicorn running on http://127.0.0.1:{port}", what="the gateway")
        try:
            assert servers and servers[0].port == port_before
            await wait_serving(gateway, f"http://127.0.0.1:{http_port}/readyz", timeout=60, what="the gateway to be ready")
        finally:
            gateway.kill()
    finally:
        for server in servers:
            server.close()


def test_a_wrong_password_still_exits_at_once_with_one_line(redis_binary: str) -> None:
    # Given a Redis that wants a password, and a worker given another one
    server = RedisServer(redis_binary).start()
    try:
        with sync_redis.Redis(port=server.port) as admin:
            admin.config_set("requirepass", "the-right-one")
        url = f"redis://:not-it-s3cret@127.0.0.1:{server.port}/0"
        done = subprocess.run(streamcrew_cmd("worker"), capture_output=True, text=True, timeout=120,
                              env={**os.environ, "STREAMCREW_REDIS_URL": url, "STREAMCREW_METRICS_PORT": "0"})
        # Then waiting would not help: one line, exit 4, and the password appears nowhere
        assert done.returncode == 4, done.stderr[-3000:]
        assert "cannot reach Redis" in done.stderr and "Traceback" not in done.stderr, done.stderr[-3000:]
        assert "not-it-s3cret" not in done.stderr + done.stdout
    finally:
        server.close()


def test_no_password_for_a_redis_that_wants_one_says_what_the_url_lacks(redis_binary: str) -> None:
    # Given a Redis that wants a password, and a worker whose URL gives none
    server = RedisServer(redis_binary).start()
    try:
        with sync_redis.Redis(port=server.port) as admin:
            admin.config_set("requirepass", "the-right-one")
        done = subprocess.run(streamcrew_cmd("worker"), capture_output=True, text=True, timeout=120,
                              env={**os.environ, "STREAMCREW_REDIS_URL": f"redis://127.0.0.1:{server.port}/0", "STREAMCREW_METRICS_PORT": "0"})
        # Then one line, exit 4, naming what is missing (Redis' own text speaks of HELLO and AUTH only)
        assert done.returncode == 4, done.stderr[-3000:]
        assert "it asks for a password, and the URL gives none: redis://:PASSWORD@host:port/0" in " ".join(done.stderr.split()), done.stderr[-3000:]
    finally:
        server.close()
