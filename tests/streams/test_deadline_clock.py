"""A request's deadline is judged by Redis' clock, not by the clock of the worker that takes it (contract §2)."""

from __future__ import annotations

import orjson
import pytest
from redis.asyncio import Redis

from streams.keys import Keys
from streams.producer import Producer
from streams.scripts import Scripts


async def _redis_ms(redis: Redis) -> int:
    seconds, micros = await redis.time()
    return int(seconds) * 1000 + int(micros) // 1000


@pytest.mark.parametrize("skew_ms", [120_000, -120_000], ids=["worker-clock-ahead", "worker-clock-behind"])
async def test_a_deadline_is_past_by_redis_clock_whatever_the_workers(redis: Redis, keys: Keys, producer: Producer, skew_ms: int) -> None:
    # Given two jobs, one with a minute left before its deadline by Redis' clock and one a minute past it
    now = await _redis_ms(redis)
    await producer.publish("echo", {}, id="in-time", deadline=now + 60_000)
    await producer.publish("echo", {}, id="too-late", deadline=now - 60_000)
    lane = keys.lane("normal")
    ((_, entries),) = await redis.xreadgroup("workers", "w1", {lane: ">"}, count=2)
    # When a worker whose clock is two minutes off starts them (start.lua, as the worker calls it)
    batch = [[entry_id, job_id, "echo", str(now), "3", str(fields["deadline"]), "1", "", "", ""]
             for (entry_id, fields), job_id in zip(entries, ("in-time", "too-late"), strict=True)]
    reply = await Scripts(redis).start(keys=[lane, keys.slot_guard],
                                       args=[keys.job_prefix, "normal", now + skew_ms, "w1", orjson.dumps(batch).decode()])
    # Then the one with time left runs and the other expires (a clock ahead expired both; one behind ran both)
    assert [(decision, job_id) for decision, _, _, job_id, *_ in reply] == [("run", "in-time"), ("expired", "too-late")]
