"""A call redis-py sends again (its reply timed out or the connection dropped after the send) may have run the first
time: Redis, stalled past the socket timeout, runs both copies once it is back. Publish and start must then do what
one call does: one job per request (not an orphan that runs, costs and calls its webhook), one attempt counted, a
replay reported done."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from streams.config import StreamSettings
from streams.dead import replay
from streams.embedded import RedisServer
from streams.envelope import DeadLetter, JobRequest, flat
from streams.jobs import JobProcessor
from streams.keys import Keys
from streams.producer import Producer
from streams.runtime import GroupRuntime
from streams.scripts import Scripts
from tests.support import StallsBeforeScript, evalsha_calls, impatient_client, stall_redis, wait_results, wait_until

STALL_MS = 1500


@pytest.fixture
async def impatient(own_redis: RedisServer) -> AsyncIterator[Redis]:
    client = impatient_client(own_redis.url)
    yield client
    await client.aclose()


async def test_a_publish_sent_again_during_a_stall_makes_one_job(own_redis: RedisServer, impatient: Redis) -> None:
    # Given a producer whose client gives a reply up after 0.5 s and sends the call again, and its script loaded
    keys = Keys("resent")
    producer = Producer(impatient, keys)
    await producer.publish("echo", {"warm": True})
    calls_before = await evalsha_calls(impatient)
    # When it publishes an id-less request while Redis is stalled for 1.5 s
    stall = await stall_redis(own_redis, STALL_MS)
    published = await producer.publish("echo", {"n": 1})
    await stall
    # Then the call went out more than once (the reply of the first timed out), yet one job was made: the one named
    assert await evalsha_calls(impatient) - calls_before >= 2, "the stall did not make redis-py send the publish again"
    entries = await impatient.xrange(keys.lane("normal"))
    assert [orjson.loads(f["data"]) for _, f in entries] == [{"warm": True}, {"n": 1}]
    assert published.created and published.job_id == entries[1][0]
    assert await impatient.hget(keys.job(published.job_id), "status") == "queued"


async def test_a_start_sent_again_counts_one_attempt(redis: Redis, keys: Keys, producer: Producer) -> None:
    # Given a job allowed one attempt, read by worker w1
    published = await producer.publish("echo", {}, id="once-only", max_attempts=1)
    lane = keys.lane("normal")
    ((_, entries),) = await redis.xreadgroup("workers", "w1", {lane: ">"}, count=1)
    entry_id = entries[0][0]
    scripts = Scripts(redis)
    entry = [entry_id, published.job_id, "echo", "1", "1", "", "1", "", "", ""]
    args = [keys.job_prefix, "normal", 1_700_000_000_123, "w1", orjson.dumps([entry]).decode()]
    # When its start call runs twice, as a call sent again after a lost reply does
    first = await scripts.start(keys=[lane, keys.slot_guard], args=args)
    again = await scripts.start(keys=[lane, keys.slot_guard], args=args)
    # Then both answer run with attempt 1: the copy is not a second attempt, and not "exhausted"
    assert first == [["run", 1, 1, "once-only", "1700000000123", ""]]
    assert again == first
    assert await redis.hget(keys.job("once-only"), "attempts") == "1"


async def started_by_w1(redis: Redis, keys: Keys, job_id: str) -> tuple[str, str, Scripts]:
    """The normal lane's next entry (``job_id``'s) read by consumer w1 and started (start.lua), as a worker would."""
    lane = keys.lane("normal")
    ((_, entries),) = await redis.xreadgroup("workers", "w1", {lane: ">"}, count=1)
    entry_id = entries[0][0]
    scripts = Scripts(redis)
    entry = [entry_id, job_id, "echo", "1", "3", "", "1", "", "", ""]
    await scripts.start(keys=[lane, keys.slot_guard], args=[keys.job_prefix, "normal", 1_700_000_000_123, "w1", orjson.dumps([entry]).decode()])
    return lane, entry_id, scripts


async def test_a_settle_sent_again_answers_written_and_writes_once(redis: Redis, keys: Keys, producer: Producer) -> None:
    # Given a job w1 started and finished, its settle call ready
    published = await producer.publish("echo", {}, id="settled-once")
    lane, entry_id, scripts = await started_by_w1(redis, keys, published.job_id)
    result = flat({"id": "settled-once", "agent": "echo", "status": "completed", "result": "{}", "attempts": "1",
                   "submitted_at": "1", "started_at": "1700000000123", "finished_at": "1700000000200", "worker": "w1"})
    op = ["done", lane, entry_id, f"normal/{entry_id}", "settled-once", result, [], ""]
    args = [keys.job_prefix, "workers", 1_048_576, 60, f"{keys.prefix}:requests:", orjson.dumps([op]).decode()]
    settle_keys = [keys.results, keys.dead, keys.delayed, keys.slot_guard]
    # When the settle call runs twice, as a call sent again after a lost reply does
    first = await scripts.settle(keys=settle_keys, args=args)
    again = await scripts.settle(keys=settle_keys, args=args)
    # Then both say written (the worker counts the job and logs no "fenced"), and one result event exists
    assert first == again == [1]
    assert await redis.xlen(keys.results) == 1
    assert await redis.hget(keys.job("settled-once"), "status") == "completed"
    # While another attempt's ending of the same job (another finish time) is still fenced
    other = [*op[:5], flat({**dict(zip(result[::2], result[1::2])), "finished_at": "1700000000999"}), [], ""]
    late = await scripts.settle(keys=settle_keys, args=[*args[:5], orjson.dumps([other]).decode()])
    assert late == [0]
    assert await redis.xlen(keys.results) == 1


async def test_a_replay_sent_again_during_a_stall_reports_the_replay(own_redis: RedisServer) -> None:
    # Given a dead letter, and an operator's client that gives a reply up after 0.5 s and sends the call again
    keys = Keys("resent")
    client = StallsBeforeScript.to(own_redis)
    letter = DeadLetter(id="again", agent="echo", reason="exhausted", error="boom", source_stream=keys.lane("normal"),
                        source_id="1700000000000-0", attempts=3, dead_at=1_700_000_000_500,
                        request={"agent": "echo", "data": "{}"})
    entry_id = await client.xadd(keys.dead, letter.to_fields())
    await client.hset(keys.job("again"), mapping={"status": "failed", "attempts": "3"})
    await client.script_load(Scripts(client).replay.script)  # loaded: the copies run it rather than answer NOSCRIPT
    calls_before = await evalsha_calls(client)
    # When it replays the letter while Redis stalls for 1.5 s just as the replay script is sent
    client.armed_ms = STALL_MS
    try:
        replayed = await replay(client, keys, entry_id)
    finally:
        if client.stall is not None:
            await client.stall
    # Then the call went out more than once, yet the replay is reported done (not "vanished") and made one request
    assert await evalsha_calls(client) - calls_before >= 2, "the stall did not make redis-py send the replay again"
    assert replayed.job_id == "again"
    assert [f["id"] for _, f in await client.xrange(keys.lane("normal"))] == ["again"]
    assert await client.xlen(keys.dead) == 0
    assert await client.hget(keys.job("again"), "status") == "queued"
    await client.aclose()


class Echo:
    """The job executor of a worker serving one agent that answers at once (the worker's plug, not a stand-in for Redis)."""

    def check(self, request: JobRequest) -> str | None:
        return None

    def check_step(self, agent: str, data: dict[str, Any]) -> str | None:
        return None

    def max_attempts(self, request: JobRequest) -> int:
        return request.max_attempts or 3

    async def execute(self, request: JobRequest, job_id: str, attempt: int, max_attempts: int) -> tuple[Any, dict[str, Any] | None]:
        return {"echo": request.data, "attempt": attempt}, None


async def test_a_start_whose_copies_all_went_unanswered_is_not_a_second_attempt(own_redis: RedisServer) -> None:
    # Given a job allowed one attempt, read by a worker whose client gives a reply up after 0.5 s (and sends it again twice)
    keys = Keys("restarted")
    client = StallsBeforeScript.to(own_redis)
    settings = StreamSettings(redis_url=own_redis.url, prefix=keys.prefix)
    runtime = GroupRuntime(client, streams=keys.lanes, group="workers", consumer="w1", concurrency=4, lease_s=30, block_ms=100)
    processor = JobProcessor(client, keys, settings, runtime, Echo())
    writer = asyncio.create_task(processor.settler.run())
    published = await Producer(client, keys).publish("echo", {"n": 1}, id="one-try", max_attempts=1)
    lane = keys.lane("normal")
    ((_, entries),) = await client.xreadgroup("workers", "w1", {lane: ">"}, count=1)
    await client.script_load(Scripts(client).start.script)  # loaded: the copies run it rather than answer NOSCRIPT
    # When Redis stalls 3 s as its start call is sent: every copy goes unanswered within redis-py's retries, so the
    # worker tries the start again, and Redis runs all of them once it is back
    client.armed_ms = 3000
    try:
        await runtime.deliver(lane, entries, reclaimed=False)
    finally:
        if client.stall is not None:
            await client.stall
    # Then the job runs and completes in its one attempt: the start tried again is not a second attempt
    ended = await wait_results(client, keys, 1, timeout=10)
    await processor.settler.close(writer)
    assert [(r.id, r.status.value, r.attempts) for r in ended] == [(published.job_id, "completed", 1)]
    assert await client.hget(keys.job("one-try"), "attempts") == "1"
    await client.aclose()


async def drained_through_stall(client: StallsBeforeScript, runtime: GroupRuntime, processor: JobProcessor,
                                writer: asyncio.Task[Any], reader: asyncio.Task[Any], *, grace_s: float) -> tuple[int, int]:
    """Drain the worker while its client's armed stall holds a call; then let the stall end and stop the settle
    writer and the reader. Returns the drain's ``(finished, handed_back)``."""
    try:
        finished, handed_back = await runtime.drain(grace_s)
    finally:
        assert client.stall is not None
        await client.stall
    await processor.settler.close(writer)
    await asyncio.gather(reader, return_exceptions=True)
    return finished, handed_back


async def test_a_drain_while_a_start_call_is_under_way_finishes_the_job(own_redis: RedisServer) -> None:
    # Given a worker reading with a 120 s lease, whose next script call (the start of the job it reads) meets a 1 s stall
    keys = Keys("drained")
    client = StallsBeforeScript.to(own_redis, timeout_s=5)  # patient: the call is sent once
    settings = StreamSettings(redis_url=own_redis.url, prefix=keys.prefix)
    runtime = GroupRuntime(client, streams=keys.lanes, group="workers", consumer="w1", concurrency=4, lease_s=120,
                           block_ms=100, tick_s=3600)  # no upkeep script before the start's
    processor = JobProcessor(client, keys, settings, runtime, Echo())
    writer = asyncio.create_task(processor.settler.run())
    reader = asyncio.create_task(runtime.run())
    await client.script_load(Scripts(client).start.script)
    client.armed_ms = 1000
    async with Redis.from_url(own_redis.url, decode_responses=True) as producer_client:
        published = await Producer(producer_client, keys).publish("echo", {"n": 1}, id="mid-start")
    await wait_until(lambda: client.stall is not None, timeout=10, what="the start call to meet the stall")
    # When the worker drains (SIGTERM) while that start call is under way
    finished, handed_back = await drained_through_stall(client, runtime, processor, writer, reader, grace_s=5)
    # Then the job it started is not left running unseen until the lease: it finished within the grace, in one attempt
    assert (finished, handed_back) == (1, 0)
    ended = await wait_results(client, keys, 1, timeout=5)
    assert [(r.id, r.status.value, r.attempts) for r in ended] == [(published.job_id, "completed", 1)]
    assert (await client.xpending(keys.lane("normal"), "workers"))["pending"] == 0
    await client.aclose()


async def test_a_retry_settle_sent_again_answers_written_and_schedules_once(redis: Redis, keys: Keys, producer: Producer) -> None:
    # Given a job w1 started whose attempt failed, its retry settle ready
    published = await producer.publish("echo", {}, id="retried-once")
    lane, entry_id, scripts = await started_by_w1(redis, keys, published.job_id)
    member = orjson.dumps({"lane": "normal", "id": "retried-once", "fields": {"agent": "echo", "data": "{}", "id": "retried-once"}}).decode()
    op = ["retry", lane, entry_id, f"normal/{entry_id}", "retried-once", "60000", member, "boom", ""]  # due in 60 s
    args = [keys.job_prefix, "workers", 1_048_576, 60, f"{keys.prefix}:requests:", orjson.dumps([op]).decode()]
    settle_keys = [keys.results, keys.dead, keys.delayed, keys.slot_guard]
    # When the settle call runs twice, as a call sent again after a lost reply does
    seconds, micros = await redis.time()
    before_ms = seconds * 1000 + micros // 1000
    first = await scripts.settle(keys=settle_keys, args=args)
    again = await scripts.settle(keys=settle_keys, args=args)
    # Then both say written (the worker logs no "fenced"), and the retry is scheduled once
    assert first == again == [1]
    assert await redis.zrange(keys.delayed, 0, -1) == [member]
    assert await redis.hget(keys.job("retried-once"), "status") == "retrying"
    # While another ending of the same attempt (another due time) is still fenced
    late = await scripts.settle(keys=settle_keys, args=[*args[:5], orjson.dumps([[*op[:5], "120000", *op[6:]]]).decode()])
    assert late == [0]
    seconds, micros = await redis.time()
    after_ms = seconds * 1000 + micros // 1000
    assert before_ms + 60_000 <= await redis.zscore(keys.delayed, member) <= after_ms + 60_000  # by Redis' clock


async def test_a_hand_back_sent_again_answers_written_and_adds_one_copy(redis: Redis, keys: Keys, producer: Producer) -> None:
    # Given a job w1 started, then drained, its hand-back call ready
    published = await producer.publish("echo", {}, id="handed-once")
    lane, entry_id, scripts = await started_by_w1(redis, keys, published.job_id)
    fields = flat({"agent": "echo", "data": "{}", "id": "handed-once", "source_id": entry_id})
    op = ["handback", lane, entry_id, f"normal/{entry_id}", "handed-once", fields, "", "w1"]
    args = [keys.job_prefix, "workers", 1_048_576, 60, f"{keys.prefix}:requests:", orjson.dumps([op]).decode()]
    settle_keys = [keys.results, keys.dead, keys.delayed, keys.slot_guard]
    # When the call runs twice, as a call sent again after a lost reply does
    first = await scripts.settle(keys=settle_keys, args=args)
    again = await scripts.settle(keys=settle_keys, args=args)
    # Then both say handed back (the drain's count is right), and one copy went back, to the lane's resumed stream (read
    # before the lane: the job does not wait behind the lane's backlog a second time)
    assert first == again == [1]
    assert await redis.xlen(lane) == 1
    ((copy, _),) = await redis.xrange(keys.resumed("normal"))
    assert await redis.hget(keys.job("handed-once"), "source") == f"resumed-normal/{copy}"
    assert await redis.hmget(keys.job("handed-once"), ["status", "attempts"]) == ["queued", "0"]
    assert (await redis.xpending(lane, "workers"))["pending"] == 0
    # While another worker's hand-back of the same entry is no copy of it
    other = [*op[:7], "w2"]
    assert await scripts.settle(keys=settle_keys, args=[*args[:5], orjson.dumps([other]).decode()]) == [0]
    assert await redis.xlen(lane) + await redis.xlen(keys.resumed("normal")) == 2
