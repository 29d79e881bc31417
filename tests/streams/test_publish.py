"""Publishing: explicit ids never collide with generated ones, and an id-less job never adopts a record."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from streams.embedded import RedisServer
from streams.envelope import JobRequest
from streams.errors import InvalidRequest, RequestTooLarge
from streams.keys import Keys, partition_keys
from streams.producer import Producer


@pytest.mark.parametrize("job_id", ["1700000000000-0", "normal:1700000000000-7", "low:1-1"])
async def test_explicit_ids_of_the_generated_shapes_are_refused(redis, keys: Keys, producer: Producer, job_id: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidRequest, match="reserved"):
        await producer.publish("echo", {}, id=job_id)
    assert not await redis.exists(keys.lane("normal"))


@pytest.mark.parametrize("job_id", ["wf-42::reviews", "a::b::c", "::x"])
async def test_explicit_ids_with_the_step_separator_are_refused(redis, keys: Keys, producer: Producer, job_id: str) -> None:  # type: ignore[no-untyped-def]
    # '::' names another workflow's step: a producer choosing it could read or take over that step's record
    with pytest.raises((InvalidRequest, ValueError), match="'::' is reserved"):
        await producer.publish("echo", {}, id=job_id)
    assert not await redis.exists(keys.lane("normal"))


async def test_a_batch_with_one_request_too_large_publishes_nothing(redis, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    # Given a producer over 4 partitions with a 2,000-byte limit, and a batch whose last request is too large
    producer = Producer(redis, keys, partitions=4, max_request_bytes=2000)
    requests = [JobRequest(agent="echo", data={"i": i}, id=f"fits-{i}") for i in range(20)]
    requests.append(JobRequest(agent="echo", data={"blob": "x" * 3000}, id="too-large"))
    # When it is published
    with pytest.raises(RequestTooLarge):
        await producer.publish_many(requests, priority="normal")
    # Then no partition got any of it (a caller sending the others again publishes each once)
    for part in partition_keys(keys, 4):
        assert not await redis.xlen(part.lane("normal")), part.lane("normal")


async def test_ids_of_other_shapes_are_fine(producer: Producer) -> None:
    for job_id in ("ORD-12345-status", "wf-42:reviews", "1700000000000", "a-1-2", "x.y_z"):
        assert (await producer.publish("echo", {}, id=job_id)).job_id == job_id


async def test_an_id_less_job_whose_both_names_are_taken_is_withdrawn(redis, keys: Keys, producer: Producer) -> None:  # type: ignore[no-untyped-def]
    # Given records squatting the next entry ID of the clock and its '<lane>:' form (only a raw XADD can do it)
    ahead = 9_999_999_999_000
    await redis.set(keys.clock, f"{ahead}-0")
    for job_id in (f"{ahead}-1", f"normal:{ahead}-1"):
        await redis.hset(keys.job(job_id), mapping={"status": "queued", "tenant": "squatter"})
    # When an id-less job is published on that entry ID
    published = await producer.publish("echo", {"mine": True})
    # Then it adopts neither record: it is answered 'conflict' and its entry is withdrawn
    assert (published.job_id, published.status, published.created) == ("", "conflict", False)
    assert await redis.xlen(keys.lane("normal")) == 0
    for job_id in (f"{ahead}-1", f"normal:{ahead}-1"):
        assert await redis.hgetall(keys.job(job_id)) == {"status": "queued", "tenant": "squatter"}
    # And the next one gets a fresh id
    assert (await producer.publish("echo", {})).job_id == f"{ahead}-2"


async def test_an_id_less_job_whose_entry_id_is_taken_gets_its_lane_name(redis, keys: Keys, producer: Producer) -> None:  # type: ignore[no-untyped-def]
    # Given a record squatting the next entry ID of the clock (a raw XADD named it), but not its '<lane>:' form
    ahead = 9_999_999_999_000
    await redis.set(keys.clock, f"{ahead}-0")
    await redis.hset(keys.job(f"{ahead}-1"), mapping={"status": "queued", "tenant": "squatter"})
    # When an id-less job is published on that entry ID, with a tenant and a webhook
    published = await producer.publish("echo", {}, tenant="acme", webhook="https://example.com/hook")
    # Then it is named '<lane>:<entry ID>', and its record holds the request's own fields with the rest
    assert (published.job_id, published.status, published.created) == (f"normal:{ahead}-1", "queued", True)
    record = await redis.hgetall(keys.job(f"normal:{ahead}-1"))
    assert {k: record.get(k) for k in ("status", "agent", "tenant", "webhook", "source")} == {
        "status": "queued", "agent": "echo", "tenant": "acme", "webhook": "https://example.com/hook",
        "source": f"normal/{ahead}-1"}
    assert await redis.hgetall(keys.job(f"{ahead}-1")) == {"status": "queued", "tenant": "squatter"}


async def test_an_id_less_publish_writes_each_record_once(own_redis: RedisServer) -> None:
    # Each write is sent again to every replica: a job's record is one HSET, and a name found free is not looked up twice
    redis = Redis.from_url(own_redis.url, decode_responses=True)
    try:
        producer = Producer(redis, Keys("publish-once"))
        await producer.publish("echo", {"warm": True})  # the groups and the script are made before the count
        await redis.config_resetstat()
        requests = [JobRequest(agent="echo", data={"i": i}, tenant="acme", webhook="https://example.com/hook") for i in range(50)]
        await producer.publish_many(requests, priority="normal")
        calls = {name.removeprefix("cmdstat_"): stat["calls"] for name, stat in (await redis.info("commandstats")).items()}
        assert (calls.get("hset"), calls.get("exists"), calls.get("xadd")) == (50, 50, 50), calls
    finally:
        await redis.aclose()


@pytest.mark.parametrize(("options", "field", "words"), [
    ({"timeout_s": float("inf")}, "timeout_s", "finite"),
    ({"timeout_s": float("nan")}, "timeout_s", "finite"),
    ({"timeout_s": 86_401}, "timeout_s", "less than or equal to 86400"),
    ({"max_attempts": 1001}, "max_attempts", "less than or equal to 1000"),
    ({"max_attempts": 10**30}, "max_attempts", "less than or equal to 1000"),
    ({"max_attempts": 0}, "max_attempts", "greater than or equal to 1"),
])
async def test_out_of_range_attempt_bounds_are_refused_as_post_jobs_refuses_them(  # type: ignore[no-untyped-def]
        redis, keys: Keys, producer: Producer, options: dict[str, float], field: str, words: str) -> None:
    # Given the bounds POST /jobs holds timeout_s and max_attempts to (an endless timeout, attempts without end)
    # When the Python API is given a value outside them
    with pytest.raises(ValueError, match=words) as refused:
        await producer.publish("echo", {}, id="bounded", **options)  # type: ignore[arg-type]
    # Then it is a ValueError naming the field, and nothing is queued
    assert field in str(refused.value)
    assert not await redis.exists(keys.lane("normal")) and not await redis.exists(keys.job("bounded"))


async def test_many_large_requests_go_in_calls_redis_takes(own_redis: RedisServer) -> None:
    # Given a Redis whose argument limit (proto-max-bulk-len) is 24 MB, and 20 requests of 0.9 MB of '"', each within
    # the request limit, and each ~1.8 MB once JSON-escaped again in a publish call (a gateway batch of concurrent ones)
    redis = Redis.from_url(own_redis.url, decode_responses=True)
    try:
        await redis.config_set("proto-max-bulk-len", 24 * 1024 * 1024)
        keys = Keys("big")
        requests = [JobRequest(agent="echo", data={"s": '"' * 450_000}, id=f"big-{i}") for i in range(20)]
        # When they are published together
        published = await Producer(redis, keys).publish_many(requests)
        # Then every one is queued: the calls are cut by bytes too, not only by count (one call of all 20 was ~36 MB)
        assert all(p.created for p in published) and await redis.xlen(keys.lane("normal")) == 20
    finally:
        await redis.aclose()


async def test_a_producer_shared_by_many_tasks_at_once_publishes_every_request(redis, keys: Keys, producer: Producer) -> None:  # type: ignore[no-untyped-def]
    """The first design's pattern: one Producer, an asyncio.gather of many publishes. redis-py 8's pool stops at 100
    connections and failed the 101st call at once (MaxConnectionsError); the pool now waits for a free one."""
    import asyncio

    from streams.records import get_job

    published = await asyncio.gather(*(producer.publish("echo", {"i": i}, id=f"many-{i}") for i in range(300)), return_exceptions=True)
    failed = [p for p in published if isinstance(p, BaseException)]
    assert not failed, f"{len(failed)} of 300 failed, e.g. {failed[0]!r}"
    assert await redis.xlen(keys.lane("normal")) == 300
    records = await asyncio.gather(*(get_job(redis, keys, f"many-{i}") for i in range(300)), return_exceptions=True)
    assert all(r is not None and not isinstance(r, BaseException) and r.status == "queued" for r in records)


@pytest.mark.parametrize(("options", "words"), [
    ({"webhook": "example.com/hook"}, "webhook must be an absolute http:// or https:// URL"),
    ({"webhook": "ftp://example.com/hook"}, "webhook must be an absolute http:// or https:// URL"),
    ({"tenant": "acme corp"}, "tenant must not contain whitespace or control characters"),
    ({"tenant": "x" * 201}, "tenant must be 1-200 characters"),
])
async def test_the_python_api_refuses_what_the_gateway_refuses_before_anything_is_queued(  # type: ignore[no-untyped-def]
    redis, keys: Keys, producer: Producer, options: dict[str, str], words: str,
) -> None:
    # A job queued with either ran (its LLM calls paid) and its webhook was dead-lettered, never delivered
    with pytest.raises(InvalidRequest, match=words):
        await producer.publish("echo", {}, **options)
    with pytest.raises(InvalidRequest, match=words):
        await producer.publish_many([JobRequest(agent="echo", data={}, id="fine"), JobRequest(agent="echo", data={}, **options)])
    assert not await redis.exists(keys.lane("normal"), keys.job("fine"))


@pytest.mark.parametrize("field", ["tenant", "webhook", "traceparent"])
async def test_a_lone_surrogate_is_refused_naming_its_field_before_any_request_of_a_batch_is_sent(  # type: ignore[no-untyped-def]
    redis, keys: Keys, producer: Producer, field: str,
) -> None:
    # Given a batch whose first request goes to another lane (sent first) and whose second holds a str that is no Unicode
    value = {"tenant": "acme\ud800", "webhook": "https://example.com/\ud800", "traceparent": "00-\ud800"}[field]
    batch = [JobRequest(agent="echo", data={"priority": 9}, id="sent-first"), JobRequest(agent="echo", data={}, id="broken", **{field: value})]
    # When it is published, Then it is refused naming the field, and nothing was queued (before: a TypeError naming
    # nothing, the other lane's request queued)
    with pytest.raises(InvalidRequest, match=f"{field} is not valid Unicode text"):
        await producer.publish_many(batch)
    assert not await redis.exists(keys.job("sent-first"), keys.lane("high"), keys.lane("normal"))


async def test_a_repeated_id_answers_the_lane_its_job_is_in_not_the_callers(redis, keys: Keys, producer: Producer) -> None:  # type: ignore[no-untyped-def]
    # Given a job queued in the low lane
    first = await producer.publish("echo", {}, id="once", priority="low")
    # When the same id is published again, to the high lane, alone and in a batch
    again = await producer.publish("echo", {}, id="once", priority="high")
    batch = await producer.publish_many([JobRequest(agent="echo", data={}, id="once"), JobRequest(agent="echo", data={}, id="new")],
                                        priority="high")
    # Then it names the lane its one job waits in (the gateway's 202 said "high" for a job queued in "low")
    assert (first.lane, first.created) == ("low", True)
    assert (again.lane, again.created) == ("low", False)
    assert [(p.job_id, p.lane, p.created) for p in batch] == [("once", "low", False), ("new", "high", True)]
    assert await redis.xlen(keys.lane("high")) == 1


async def test_a_repeated_id_of_a_resumed_job_answers_its_lane(redis, keys: Keys, producer: Producer) -> None:  # type: ignore[no-untyped-def]
    # Given a job whose record names the stream it was handed back to (a drain's resumed-normal)
    await producer.publish("echo", {}, id="handed-back", priority="normal")
    await redis.hset(keys.job("handed-back"), "lane", "resumed-normal")
    # When its id is published again, the answer names its lane, not the stream (docs: high, normal or low)
    again = await producer.publish("echo", {}, id="handed-back", priority="high")
    assert (again.lane, again.created) == ("normal", False)
