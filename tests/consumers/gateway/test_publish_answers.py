"""A POST /jobs whose job Redis took is answered as taken, even when Redis goes away right after."""

from __future__ import annotations

import asyncio

from streams.keys import Keys
from tests.consumers.gateway.support import GatewayFactory
from tests.severed import severed_after


async def test_a_tenant_job_redis_took_is_202_though_redis_goes_away_after(  # type: ignore[no-untyped-def]
        gateways: GatewayFactory, redis, redis_url: str, keys: Keys) -> None:
    # Given a gateway with a tenant-bound key, whose Redis is reached through a link that can go away
    async with severed_after(redis_url, scripts=1_000_000) as link:
        # (in a thread of its own: the start waits for the gateway without yielding, and the link runs on this loop)
        gateway = await asyncio.to_thread(asyncio.run, gateways.start({"STREAMCREW_API_KEYS": "k-acme:acme"}, redis_url=link.url))
        async with gateway.client("k-acme") as client:
            assert (await client.post("/jobs", json={"agent": "echo", "data": {"warm": True}})).status_code == 202
            # When Redis goes away for good once the next job's publish is answered
            link.scripts = link.answered + 1
            answer = await client.post("/jobs", json={"agent": "echo", "data": {"n": 1}})
        assert link.cut.is_set(), answer.text
    # Then the caller hears the truth: 202 with the job's id (an id-less job sent again after a 503 would run twice)
    assert answer.status_code == 202, answer.text
    job_id = answer.json()["job_id"]
    # And Redis agrees: that job is queued, its record already naming the tenant
    assert await redis.hget(keys.job(job_id), "tenant") == "acme"
    assert await redis.xlen(keys.lane("normal")) == 2
