"""STREAMCREW_REPLICA_ACKS on one Redis without replicas: each settle batch WAITs, finds none, logs, and goes on."""

from __future__ import annotations

import logging

from redis.asyncio import Redis

from streams.keys import Keys
from streams.settle import Settler, drop_op


async def test_a_settle_batch_waits_for_replicas_and_goes_on_without_them(redis: Redis, keys: Keys, caplog) -> None:
    released: list[tuple[str, str]] = []
    settler = Settler(redis, keys, group="workers", results_maxlen=100, job_ttl_s=60,
                      release=lambda s, e: released.append((s, e)), replica_acks=1)
    before = int((await redis.info("commandstats")).get("cmdstat_wait", {}).get("calls", 0))
    with caplog.at_level(logging.WARNING, logger="streams.settle"):
        assert await settler._write([drop_op(keys.lane("normal"), "1-0")]) == [False]
    after = int((await redis.info("commandstats")).get("cmdstat_wait", {}).get("calls", 0))
    assert after == before + 1
    assert "acknowledged by 0 of 1 replicas" in caplog.text
