"""Publishes that arrive together go out together, yet each keeps its own answer."""

from __future__ import annotations

import asyncio

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from consumers.gateway.batching import PublishBatcher
from streams.connection import connect
from streams.envelope import JobRequest
from streams.errors import InvalidRequest, RequestTooLarge
from streams.keys import Keys, partition_keys
from streams.producer import Producer
from streams.records import get_job
from tests.severed import severed_after


async def test_a_batch_keeps_order_ids_and_isolates_an_oversized_request(redis, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    # Given a batcher over a producer with a 500-byte cap, counting its calls
    producer = Producer(redis, keys, max_request_bytes=500)
    calls: list[int] = []
    publish_each = producer.publish_each

    async def counting(requests, **kw):  # type: ignore[no-untyped-def]
        requests = list(requests)
        calls.append(len(requests))
        return await publish_each(requests, **kw)

    producer.publish_each = counting  # type: ignore[method-assign]
    batcher = PublishBatcher(producer)
    # When 20 requests (two sharing an id) and one oversized one are published in the same tick
    requests = [JobRequest(agent="echo", data={"i": i}, id="dup" if i in (3, 7) else None) for i in range(20)]
    tasks = [batcher.publish(r, "low") for r in requests] + [batcher.publish(JobRequest(agent="echo", data={"x": "y" * 600}), "low")]
    answers = await asyncio.gather(*tasks, return_exceptions=True)
    # Then they went out as one batch, then one by one after the size error, and each got its own answer
    assert calls[0] == 21 and all(n == 1 for n in calls[1:])
    assert isinstance(answers[-1], RequestTooLarge)
    published = answers[:-1]
    assert [p.created for p in published] == [i != 7 for i in range(20)]  # type: ignore[union-attr]
    assert published[3].job_id == published[7].job_id == "dup"  # type: ignore[union-attr]
    assert await redis.xlen(keys.lane("low")) == 19


async def test_a_redis_error_reaches_every_waiting_request(redis, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    producer = Producer(redis, keys)

    async def broken(requests, **kw):  # type: ignore[no-untyped-def]
        raise ConnectionError("down")

    producer.publish_each = broken  # type: ignore[method-assign]
    batcher = PublishBatcher(producer)
    waiting = [batcher.publish(JobRequest(agent="echo", data={}), "normal") for _ in range(5)]
    answers = await asyncio.gather(*waiting, return_exceptions=True)
    assert all(isinstance(a, ConnectionError) for a in answers)
    # And the next publish starts a fresh flush
    with pytest.raises(ConnectionError):
        await batcher.publish(JobRequest(agent="echo", data={}), "normal")


async def test_a_request_that_cannot_be_encoded_fails_alone(redis, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    # Given a batch where one request slipped past validation with an integer orjson cannot encode
    batcher = PublishBatcher(Producer(redis, keys))
    poison = JobRequest.model_construct(agent="echo", data={"n": 2**70}, id=None, webhook=None, tenant=None,
                                        max_attempts=None, timeout_s=None, deadline=None, traceparent=None, submitted_at=None)
    requests = [JobRequest(agent="echo", data={"i": i}) for i in range(10)]
    requests.insert(4, poison)
    answers = await asyncio.gather(*(batcher.publish(r, "normal") for r in requests), return_exceptions=True)
    # Then only the poison one failed, with the reason, and the other ten are queued
    assert isinstance(answers[4], InvalidRequest) and "64-bit" in str(answers[4])
    assert all(a.created for i, a in enumerate(answers) if i != 4)  # type: ignore[union-attr]
    assert await redis.xlen(keys.lane("normal")) == 10


async def test_a_batch_redis_drops_part_way_tells_each_request_whether_it_was_queued(redis, redis_url: str, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    # Given a batcher of 5 requests a call over a producer whose Redis is reached through a link that can go away
    async with severed_after(redis_url, scripts=1_000_000) as link:
        client = connect(link.url)
        producer = Producer(client, keys)
        await producer.ensure_groups()
        batcher = PublishBatcher(producer, max_batch=5)
        # When ten requests wait together (two calls, one after the other) and Redis goes away for good once the
        # first call is answered
        link.scripts = link.answered + 1
        answers = await asyncio.gather(*(batcher.publish(JobRequest(agent="echo", data={"i": i}), "normal") for i in range(10)),
                                       return_exceptions=True)
        assert link.cut.is_set()
        await client.aclose()
    # Then the requests Redis took are answered with their job, the others with the outage
    assert all(not isinstance(a, BaseException) for a in answers[:5]), answers
    assert all(isinstance(a, RedisConnectionError) for a in answers[5:]), answers
    # And Redis agrees: exactly the jobs answered as queued are in the lane
    in_lane = [fields["data"] for _, fields in await redis.xrange(keys.lane("normal"))]
    assert sorted(in_lane) == sorted(f'{{"i":{i}}}' for i in range(5))
    for published in answers[:5]:
        assert await get_job(redis, keys, published.job_id) is not None  # type: ignore[union-attr]


async def test_a_publish_redis_drops_part_way_tells_each_request_whether_it_was_queued(redis, redis_url: str, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    # Given a two-partition producer on one Redis, reached through a link that can go away
    async with severed_after(redis_url, scripts=1_000_000) as link:
        client = connect(link.url)
        producer = Producer(client, keys, partitions=2)
        await producer.ensure_groups()
        # When ten id-less requests go out in one publish (one call per partition, one after the other on one Redis)
        # and Redis goes away for good once the first of those calls is answered
        link.scripts = link.answered + 1
        answers = await producer.publish_each([JobRequest(agent="echo", data={"i": i}) for i in range(10)], priority="normal")
        assert link.cut.is_set()
        await client.aclose()
    # Then the requests Redis took are answered with their job, the others with the outage
    queued = [a for a in answers if not isinstance(a, BaseException)]
    failed = [a for a in answers if isinstance(a, BaseException)]
    assert len(queued) == len(failed) == 5, answers
    assert all(isinstance(a, RedisConnectionError) for a in failed), failed
    # And Redis agrees: exactly the jobs answered as queued are in the lanes
    lanes = [k.lane("normal") for k in partition_keys(keys, 2)]
    in_lanes = [fields["data"] for lane in lanes for _, fields in await redis.xrange(lane)]
    assert sorted(in_lanes) == sorted(f'{{"i":{i}}}' for i, a in enumerate(answers) if not isinstance(a, BaseException))
    for published in queued:
        assert await get_job(redis, keys, published.job_id, partitions=2) is not None  # type: ignore[union-attr]
