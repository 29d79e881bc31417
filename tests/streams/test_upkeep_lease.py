"""One worker at a time does a partition's upkeep: the holder of its lease (streams.upkeep).

Before, every worker promoted due retries, checked workflow timeouts and trimmed every partition it read, about ten
script calls a second each: idle workers loaded each master in proportion to their number. Now the others ask for the
lease once a second, and take it up when its holder stops or dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator

from redis.asyncio import Redis

from streams.config import StreamSettings
from streams.embedded import RedisServer
from streams.jobs import JobProcessor
from streams.keys import Keys
from streams.runtime import GroupRuntime
from streams.scripts import Scripts
from streams.upkeep import Upkeep, UpkeepLease
from streams.workflows import WorkflowStarter
from tests.streams.test_resent_calls import Echo
from tests.support import evalsha_calls, serving, wait_until

WINDOW_S = 2.0


def upkeep_of(redis: Redis, settings: StreamSettings, keys: Keys, worker: str, *, lease_s: float = 3.0) -> Upkeep:
    """A worker's upkeep that asks Redis for its lease on every round (no answer kept)."""
    starter = WorkflowStarter(redis, settings, group="workers", worker=worker, checker=Echo(), reject=lambda *a: None,
                              release=lambda stream, entry_id: None)
    return Upkeep(Scripts(redis), starter, settings, [keys], UpkeepLease(Scripts(redis), worker, lease_s=lease_s, ask_every_s=0))


async def due_retry(redis: Redis, keys: Keys, job_id: str) -> None:
    """A retry due now, of a job with no record left (promote.lua re-adds it to its lane as it is)."""
    member = json.dumps({"lane": "normal", "id": job_id, "fields": {"agent": "echo", "id": job_id}})
    await redis.zadd(keys.delayed, {member: 0})


async def in_lane(redis: Redis, keys: Keys) -> list[str]:
    return [fields["id"] for _, fields in await redis.xrange(keys.lane("normal"))]


def holder_is(redis: Redis, keys: Keys, *workers: str | None):  # type: ignore[no-untyped-def]
    """A predicate for wait_until: the lease is held by one of ``workers`` (None: by nobody)."""
    async def check() -> bool:
        return await redis.get(keys.upkeep) in workers
    return check


async def test_the_lease_holder_alone_does_the_upkeep(redis: Redis, keys: Keys, settings: StreamSettings) -> None:
    # Given two workers' upkeep of one partition, the first of which took the lease in its round
    a, b = upkeep_of(redis, settings, keys, "a"), upkeep_of(redis, settings, keys, "b")
    await a.run()
    assert await redis.get(keys.upkeep) == "a"
    # When a retry falls due and the other worker's round comes
    await due_retry(redis, keys, "j1")
    await b.run()
    # Then it is left to the holder: still waiting, and promoted in the holder's next round
    assert await in_lane(redis, keys) == []
    await a.run()
    assert await in_lane(redis, keys) == ["j1"]
    assert await redis.zcard(keys.delayed) == 0


async def test_a_lapsed_lease_is_taken_up_by_another_worker(redis: Redis, keys: Keys, settings: StreamSettings) -> None:
    # Given a lease whose holder stopped renewing it (a worker SIGKILLed after its round)
    await upkeep_of(redis, settings, keys, "a", lease_s=0.3).run()
    b = upkeep_of(redis, settings, keys, "b")
    await due_retry(redis, keys, "j1")
    await b.run()
    assert await in_lane(redis, keys) == []
    # When it lapses
    await wait_until(holder_is(redis, keys, None), timeout=5, what="the lease to lapse")
    # Then the next worker's round takes it up and promotes the retry
    await b.run()
    assert await redis.get(keys.upkeep) == "b"
    assert await in_lane(redis, keys) == ["j1"]


async def test_a_stopping_worker_lets_its_lease_go_and_no_other(redis: Redis, keys: Keys, settings: StreamSettings) -> None:
    # Given worker a holding the lease
    a, b = upkeep_of(redis, settings, keys, "a"), upkeep_of(redis, settings, keys, "b")
    await a.run()
    # When another worker b, which holds nothing, stops (its let-go ends no lease of a's), and then a stops
    await upkeep_of(redis, settings, keys, "b").lease.let_go()
    assert await redis.get(keys.upkeep) == "a"
    assert await Scripts(redis).upkeep_lease(keys=[keys.upkeep], args=["b", 0]) == 0  # another's lease is not b's to end
    assert await redis.get(keys.upkeep) == "a"
    await a.lease.let_go()
    # Then the lease is gone at once, and the next round of b takes it
    assert await redis.exists(keys.upkeep) == 0
    await due_retry(redis, keys, "j1")
    await b.run()
    assert await in_lane(redis, keys) == ["j1"]


@contextlib.asynccontextmanager
async def idle_worker(redis: Redis, settings: StreamSettings, keys: Keys, name: str) -> AsyncIterator[JobProcessor]:
    runtime = GroupRuntime(redis, streams=keys.lanes, group="workers", consumer=name, concurrency=4, lease_s=30, block_ms=200)
    processor = JobProcessor(redis, keys, settings, runtime, Echo())
    writer = asyncio.create_task(processor.settler.run())
    try:
        async with serving(runtime):
            yield processor
        await processor.upkeep_lease.let_go()
    finally:
        await processor.settler.close(writer)


async def calls_per_s(redis: Redis) -> float:
    """Script calls a second over an observation window (nothing happens in it to await)."""
    before, started = await evalsha_calls(redis), time.monotonic()
    await asyncio.sleep(WINDOW_S)
    return (await evalsha_calls(redis) - before) / (time.monotonic() - started)


async def test_idle_workers_leave_the_upkeep_to_one(own_redis: RedisServer) -> None:
    # Given one idle worker on a Redis of the test's own, then two more beside it
    keys = Keys("leased")
    settings = StreamSettings(redis_url=own_redis.url, prefix=keys.prefix)
    redis = Redis.from_url(own_redis.url, decode_responses=True)
    try:
        async with contextlib.AsyncExitStack() as first:
            await first.enter_async_context(idle_worker(redis, settings, keys, "w1"))
            await wait_until(holder_is(redis, keys, "w1"), timeout=10, what="the first worker's lease")
            alone = await calls_per_s(redis)
            async with idle_worker(redis, settings, keys, "w2"), idle_worker(redis, settings, keys, "w3"):
                three = await calls_per_s(redis)
                # Then the two others add about a call a second each (their lease asks: ~1.3x one worker's calls), where
                # each added the holder's whole upkeep before (three times one worker's)
                assert three < 2 * alone, f"{three:.1f} script calls/s with three idle workers, {alone:.1f} with one"
                # And a retry that falls due is promoted, by the holder
                await due_retry(redis, keys, "j1")

                async def promoted() -> bool:
                    return await in_lane(redis, keys) == ["j1"]
                await wait_until(promoted, timeout=10, what="the due retry promoted")
                # And once the holder stops (as a worker process does: its loops end, then it lets its leases go),
                # the lease is free at once, and another worker takes it up within a second or so
                await first.aclose()
                assert await redis.get(keys.upkeep) in (None, "w2", "w3")
                await wait_until(holder_is(redis, keys, "w2", "w3"), timeout=10, what="another worker taking the lease up")
    finally:
        await redis.aclose()
