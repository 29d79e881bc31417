"""STREAMCREW_REPLICA_ACKS: each settle batch WAITs for replicas that hold it, on the connection that wrote it.

WAIT counts the replicas that hold the *calling connection's* last write, so a WAIT sent on another
pooled connection would return at once. A replica that is SIGSTOPped cannot acknowledge anything:
a batch then waits the whole ``WAIT_TIMEOUT_MS`` and logs it.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis as sync_redis
from redis.asyncio import Redis

from streams.connection import connect
from streams.embedded import RedisServer, free_port, path_binary
from streams.keys import Keys
from streams.settle import WAIT_TIMEOUT_MS, Settler, done_op, drop_op
from tests.support import wait_until


def settler(redis: Redis, keys: Keys) -> Settler:
    return Settler(redis, keys, group="workers", max_result_bytes=1_048_576, job_ttl_s=60, release=lambda s, e, settled=True: None, replica_acks=1)


async def wait_calls(redis: Redis) -> int:
    return int((await redis.info("commandstats")).get("cmdstat_wait", {}).get("calls", 0))


async def test_a_settle_batch_waits_for_replicas_and_goes_on_without_them(redis: Redis, keys: Keys, caplog) -> None:
    before = await wait_calls(redis)
    with caplog.at_level(logging.WARNING, logger="streams.settle"):
        assert await settler(redis, keys)._write([drop_op(keys.lane("normal"), "1-0")]) == [False]
    assert await wait_calls(redis) > before  # two when the script was not loaded yet: NOSCRIPT, load, again
    assert "acknowledged by 0 of 1 replicas" in caplog.text


class Replicated:
    """A master and one replica (``--replicaof``), each its own ``redis-server``."""

    def __init__(self, binary: str, directory: Path) -> None:
        self.master = RedisServer(binary).start()
        with sync_redis.Redis(host="127.0.0.1", port=self.master.port) as c:
            c.config_set("repl-diskless-sync-delay", 0)  # the replica syncs at once, not after Redis' default 5 s
        directory.mkdir(parents=True, exist_ok=True)
        self.replica_port = free_port()
        self.replica = subprocess.Popen(
            [binary, "--port", str(self.replica_port), "--bind", "127.0.0.1", "--dir", str(directory),
             "--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", str(directory / "redis.log"),
             "--replicaof", "127.0.0.1", str(self.master.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def close(self) -> None:
        os.kill(self.replica.pid, signal.SIGCONT)
        self.replica.terminate()
        try:
            self.replica.wait(10)
        except subprocess.TimeoutExpired:
            self.replica.kill()
            self.replica.wait(5)
        self.master.close()


@pytest.fixture
def replicated(tmp_path: Path) -> Iterator[Replicated]:
    binary = path_binary()
    if binary is None:
        pytest.skip("needs redis-server on PATH to start a master and its replica")
    pair = Replicated(binary, tmp_path / "replica")
    yield pair
    pair.close()


async def replica_caught_up(client: Redis) -> None:
    """Wait until the replica acknowledged a write that reached it through the replication stream.

    Neither "online" in INFO nor a WAIT right after the sync is enough: a write made before the
    master's backlog existed counts as acknowledged at offset 0, and until the replica's first
    acknowledgment of the stream a WAIT can block for its 1 s cron (seen: 0.93 s, failing the test).
    """
    target = 0

    async def acknowledged() -> bool:
        nonlocal target
        if not target:  # one write into the stream (once it exists, the offset moves); then wait for its acknowledgment
            await client.set("replica-probe", "1")
            target = int((await client.info("replication"))["master_repl_offset"])
            return False
        return int((await client.info("replication")).get("slave0", {}).get("offset", 0)) >= target

    await wait_until(acknowledged, timeout=20, what="the replica to acknowledge a write from its master's stream")


@pytest.fixture
async def master(replicated: Replicated) -> AsyncIterator[Redis]:
    client = connect(replicated.master.url)

    await replica_caught_up(client)
    yield client
    await client.aclose()


async def test_a_settle_batch_with_its_replica_up_is_acknowledged(master: Redis, keys: Keys, caplog) -> None:
    # Given a master that does not know the settle script (NOSCRIPT: loaded, then the pipeline sent again)
    await master.script_flush()
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="streams.settle"):
        wrote = await settler(master, keys)._write(
            [done_op(keys.lane("normal"), "1-0", "normal/1-0", "j1", {"id": "j1", "status": "completed"}, None)])
    # Then the batch is written and its replica acknowledged it well before the timeout
    assert wrote == [True]
    assert "acknowledged by" not in caplog.text
    assert time.monotonic() - started < WAIT_TIMEOUT_MS / 1000 / 2


async def test_a_settle_batch_waits_for_a_stopped_replica(replicated: Replicated, master: Redis, keys: Keys, caplog) -> None:
    # Given a master whose pool holds other connections too (as a worker's does) and a replica that cannot answer
    await master.ping()
    os.kill(replicated.replica.pid, signal.SIGSTOP)
    try:
        # When a batch that writes a result is settled with replica acks
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="streams.settle"):
            wrote = await settler(master, keys)._write(
                [done_op(keys.lane("normal"), "1-0", "normal/1-0", "j1", {"id": "j1", "status": "completed"}, None)])
        waited = time.monotonic() - started
    finally:
        os.kill(replicated.replica.pid, signal.SIGCONT)
    # Then it is written, but counted only after the WAIT timed out without the replica
    assert wrote == [True]
    assert waited >= WAIT_TIMEOUT_MS / 1000 * 0.9, f"the settle batch returned after {waited:.3f}s without waiting for the replica"
    assert "acknowledged by 0 of 1 replicas" in caplog.text
