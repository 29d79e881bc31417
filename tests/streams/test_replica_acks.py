"""STREAMCREW_REPLICA_ACKS: each settle batch WAITs for replicas that hold it, on the connection that wrote it.

WAIT counts the replicas that hold the *calling connection's* last write, so a WAIT sent on another
pooled connection would return at once. A replica that is SIGSTOPped cannot acknowledge anything:
a batch then waits the whole ``WAIT_TIMEOUT_MS`` and logs it.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from streams.connection import connect
from streams.keys import Keys
from streams.settle import WAIT_TIMEOUT_MS, Settler, done_op, drop_op
from tests.support import Replicated, replica_caught_up


def settler(redis: Redis, keys: Keys) -> Settler:
    return Settler(redis, keys, group="workers", max_result_bytes=1_048_576, job_ttl_s=60, release=lambda s, e, settled=True: None, replica_acks=1)


async def wait_calls(redis: Redis) -> int:
    return int((await redis.info("commandstats")).get("cmdstat_wait", {}).get("calls", 0))


async def test_a_settle_batch_waits_for_replicas_and_goes_on_without_them(redis: Redis, keys: Keys, caplog) -> None:
    before = await wait_calls(redis)
    with caplog.at_level(logging.WARNING, logger="streams.replicated"):
        assert await settler(redis, keys)._write([drop_op(keys.lane("normal"), "1-0")]) == [False]
    assert await wait_calls(redis) > before  # two when the script was not loaded yet: NOSCRIPT, load, again
    assert "acknowledged by 0 of 1 replicas" in caplog.text


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
    with caplog.at_level(logging.WARNING, logger="streams.replicated"):
        wrote = await settler(master, keys)._write(
            [done_op(keys.lane("normal"), "1-0", "normal/1-0", "j1", {"id": "j1", "status": "completed"}, None)])
    # Then the batch is written and its replica acknowledged it well before the timeout
    assert wrote == [True]
    assert "acknowledged by" not in caplog.text
    assert time.monotonic() - started < WAIT_TIMEOUT_MS / 1000 / 2


async def test_a_settle_batch_waits_for_a_stopped_replica(replicated: Replicated, master: Redis, keys: Keys, caplog) -> None:
    # Given a master whose pool holds other connections too (as a worker's does) and a replica that cannot answer
    await master.ping()
    os.kill(replicated.replica_pid, signal.SIGSTOP)
    try:
        # When a batch that writes a result is settled with replica acks
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="streams.replicated"):
            wrote = await settler(master, keys)._write(
                [done_op(keys.lane("normal"), "1-0", "normal/1-0", "j1", {"id": "j1", "status": "completed"}, None)])
        waited = time.monotonic() - started
    finally:
        os.kill(replicated.replica_pid, signal.SIGCONT)
    # Then it is written, but counted only after the WAIT timed out without the replica
    assert wrote == [True]
    assert waited >= WAIT_TIMEOUT_MS / 1000 * 0.9, f"the settle batch returned after {waited:.3f}s without waiting for the replica"
    assert "acknowledged by 0 of 1 replicas" in caplog.text


async def test_a_spell_without_the_replica_is_told_once_and_its_end_once(replicated: Replicated, master: Redis, keys: Keys,
                                                                        caplog) -> None:
    writer = settler(master, keys)
    # Given a replica that cannot answer for three settle batches that write results
    os.kill(replicated.replica_pid, signal.SIGSTOP)
    try:
        with caplog.at_level(logging.WARNING, logger="streams.replicated"):
            for i in range(1, 4):
                assert await writer._write([done_op(keys.lane("normal"), f"{i}-0", f"normal/{i}-0", f"j{i}",
                                                    {"id": f"j{i}", "status": "completed"}, None)]) == [True]
    finally:
        os.kill(replicated.replica_pid, signal.SIGCONT)
    # Then the log says so once, not once a batch
    assert caplog.text.count("acknowledged by 0 of 1 replicas") == 1, caplog.text
    # When the replica is back and a batch is acknowledged
    await replica_caught_up(master)
    with caplog.at_level(logging.WARNING, logger="streams.replicated"):
        assert await writer._write([done_op(keys.lane("normal"), "4-0", "normal/4-0", "j4", {"id": "j4", "status": "completed"}, None)]) == [True]
    # Then the end of the spell is told once, with how many batches went without
    assert caplog.text.count("acknowledged by 1 replicas again after") == 1 and "(3 went without)" in caplog.text, caplog.text

