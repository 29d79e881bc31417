"""A Redis that stops answering: job calls and admin reads are answered 503 within STREAMCREW_REQUEST_TIMEOUT_S, not after the
client's ~45 s of timeouts and tries, and requests answered 503 while they waited to be published are not
published later; /healthz (no Redis) answers throughout, and submissions work again once Redis is back."""

from __future__ import annotations

import asyncio

from streams.connection import connect
from streams.embedded import RedisServer
from streams.keys import Keys
from tests.consumers.gateway.support import GatewayFactory, sse_events
from tests.support import stall_redis, wait_until

STALL_MS = 6000
TIMEOUT_S = 1.0
WAITING = 5


def _job(job_id: str) -> dict[str, object]:
    return {"agent": "echo", "data": {}, "id": job_id}


async def test_job_calls_are_answered_503_within_the_deadline_while_redis_stalls(
    gateways: GatewayFactory, own_redis: RedisServer, prefix: str,
) -> None:
    # Given a gateway that waits at most 1 s on Redis for a job call
    gateway = await gateways.start({"STREAMCREW_REQUEST_TIMEOUT_S": str(TIMEOUT_S)}, redis_url=own_redis.url)
    redis = connect(own_redis.url)
    lane = Keys(prefix).lane("normal")
    try:
        async with gateway.client() as client:
            assert (await client.post("/jobs", json=_job("before"))).status_code == 202

            # When Redis stalls and a caller submits a job (its publish goes out and gets no reply), and once that
            # one is answered, more callers submit jobs (queued behind the publish in flight) and ask for a job,
            # and an operator reads the queue's figures and dead letters
            stall = await stall_redis(own_redis, STALL_MS)
            in_flight = await client.post("/jobs", json=_job("during-0"))
            *queued, read_job, stats, dead, webhooks_dead = await asyncio.gather(
                *(client.post("/jobs", json=_job(f"during-{i}")) for i in range(1, WAITING)),
                client.get("/jobs/before"), client.get("/queue/stats"), client.get("/dead"), client.get("/webhooks/dead"))
            # Then each is answered 503 redis_unavailable with Retry-After before Redis is back
            assert not stall.done(), "the answers came only after the stall ended"
            for answer in [in_flight, *queued, read_job, stats, dead, webhooks_dead]:
                assert answer.status_code == 503, answer.text
                assert answer.json()["error"]["code"] == "redis_unavailable"
                assert answer.headers["retry-after"] == "1"
            # (a read is told to retry, not about sending jobs again)
            assert "id-less" in in_flight.json()["error"]["message"]
            assert "id-less" not in stats.json()["error"]["message"]
            # And /healthz, which needs no Redis, answers meanwhile
            assert (await client.get("/healthz")).status_code == 200
            await stall

            # And once Redis is back, the publish that was on its way has queued its job (Redis ran it), and the
            # requests answered while they waited behind it were not published: their callers were told 503
            await wait_until(lambda: redis.exists(Keys(prefix).job("during-0")), timeout=10, what="the job in flight")
            again = [await client.post("/jobs", json=_job(f"during-{i}")) for i in range(WAITING)]
            # And callers sending their jobs again with their ids get each once: the one in flight exists (200)
            assert [a.status_code for a in again] == [200] + [202] * (WAITING - 1), [a.text for a in again]
            assert await redis.xlen(lane) == 1 + WAITING
    finally:
        await redis.aclose()


async def test_a_job_named_events_is_read_within_the_deadline(gateways: GatewayFactory, own_redis: RedisServer) -> None:
    # Given a gateway that waits at most 1 s on Redis for a job call
    gateway = await gateways.start({"STREAMCREW_REQUEST_TIMEOUT_S": str(TIMEOUT_S)}, redis_url=own_redis.url)
    async with gateway.client() as client:
        # When Redis stalls and a caller reads the job whose id is "events" (a valid id), and its result
        stall = await stall_redis(own_redis, STALL_MS)
        record, result = await asyncio.gather(client.get("/jobs/events"), client.get("/jobs/events/result"))
        # Then each is answered 503 before Redis is back: the record's path is no event stream (it was taken for one, by
        # its "/events" ending, and waited out the stall)
        assert not stall.done(), "the answers came only after the stall ended"
        for answer in (record, result):
            assert answer.status_code == 503, answer.text
            assert answer.json()["error"]["code"] == "redis_unavailable"
        await stall


async def test_the_rate_limit_answers_503_within_the_deadline_on_routes_outside_it(
    gateways: GatewayFactory, own_redis: RedisServer,
) -> None:
    # Given a gateway with keys and a rate limit (a bucket in Redis), waiting at most 1 s on Redis
    gateway = await gateways.start({"STREAMCREW_REQUEST_TIMEOUT_S": str(TIMEOUT_S), "STREAMCREW_API_KEYS": "k-operator",
                                    "STREAMCREW_RATE_LIMIT_PER_S": "100"}, redis_url=own_redis.url)
    async with gateway.client("k-operator") as client:
        assert (await client.get("/metrics")).status_code == 200
        # When Redis stalls and an operator asks for the routes the answer deadline leaves out: the metrics, the
        # OpenAPI document and a job's event stream
        stall = await stall_redis(own_redis, STALL_MS)
        answers = await asyncio.gather(client.get("/metrics"), client.get("/openapi.json"), client.get("/jobs/x/events"))
        # Then each is answered 503 redis_unavailable with Retry-After before Redis is back, as the bounded routes
        # are (they waited on the rate limiter's call until Redis answered: 75 s in the review)
        assert not stall.done(), "the answers came only after the stall ended"
        for answer in answers:
            assert answer.status_code == 503, answer.text
            assert answer.json()["error"]["code"] == "redis_unavailable"
            assert answer.headers["retry-after"] == "1"
        # And /healthz, which is not rate limited, answers meanwhile
        assert (await client.get("/healthz")).status_code == 200
        await stall
        # And once Redis is back, they answer again
        assert (await client.get("/openapi.json")).status_code == 200


async def test_an_event_streams_first_read_is_answered_503_within_the_deadline(
    gateways: GatewayFactory, own_redis: RedisServer,
) -> None:
    # Given a gateway without keys or rate limit (no call of the limiter's before the stream's own read), waiting
    # at most 1 s on Redis
    gateway = await gateways.start({"STREAMCREW_REQUEST_TIMEOUT_S": str(TIMEOUT_S)}, redis_url=own_redis.url)
    async with gateway.client() as client:
        assert (await client.post("/jobs", json=_job("streamed"))).status_code == 202
        # When Redis stalls and a caller opens the job's event stream (its first read looks the job up)
        stall = await stall_redis(own_redis, STALL_MS)
        async with client.stream("GET", "/jobs/streamed/events") as answer:
            # Then it is answered 503 redis_unavailable with Retry-After before Redis is back, as the bounded routes
            # are (it waited out the stall: the event streams are not under the answer deadline's middleware)
            assert not stall.done(), "the answer came only after the stall ended"
            await answer.aread()
            assert answer.status_code == 503, answer.text
            assert answer.json()["error"]["code"] == "redis_unavailable"
            assert answer.headers["retry-after"] == "1"
        await stall
        # And once Redis is back, the stream opens
        async with sse_events(client, "/jobs/streamed/events") as events:
            assert (await anext(events))["id"] == "0-queued"


async def test_an_event_streams_later_poll_is_cut_off_within_the_deadline(
    gateways: GatewayFactory, own_redis: RedisServer,
) -> None:
    # Given a gateway whose event streams close after 2 s, waiting at most 1 s on Redis, and a stream open on a job
    gateway = await gateways.start({"STREAMCREW_REQUEST_TIMEOUT_S": str(TIMEOUT_S), "STREAMCREW_SSE_MAX_S": "2"},
                                   redis_url=own_redis.url)
    async with gateway.client() as client:
        assert (await client.post("/jobs", json=_job("polled"))).status_code == 202
        async with sse_events(client, "/jobs/polled/events") as events:
            assert (await anext(events))["id"] == "0-queued"
            # When Redis stalls while the stream polls the job
            stall = await stall_redis(own_redis, STALL_MS)
            rest = [event async for event in events]
            # Then the stream ends at its close, before Redis is back, as its first read is answered (a poll waited
            # out the stall, holding the stream past its close)
            assert not stall.done(), "the stream ended only after the stall ended"
            assert rest == []
        await stall
