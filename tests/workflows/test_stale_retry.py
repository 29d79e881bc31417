"""A step's retry outlives its workflow's state (expired while the retry waited); a new run of the same workflow id
publishes the step afresh. The old retry is the earlier run's: its promotion must not take the new run's step over."""

from __future__ import annotations

import orjson
from redis.asyncio import Redis

from streams.config import StreamSettings
from streams.envelope import JobRequest
from streams.keys import Keys
from streams.producer import Producer
from streams.scripts import Scripts
from streams.settle import retry_op
from streams.upkeep import Upkeep, UpkeepLease
from streams.workflow import Workflow, step_job_id
from streams.workflows import ClaimedWorkflow, WorkflowStarter
from tests.streams.test_resent_calls import Echo, started_by_w1

STEP = step_job_id("wf-1", "a")
LATER_MS = 2**42  # a delay far ahead: not promoted in the test


async def run_workflow(redis: Redis, keys: Keys, producer: Producer, starter: WorkflowStarter) -> None:
    """Publish workflow wf-1 (one step, a) and start it as a worker would: its step goes to the normal lane."""
    wf = Workflow("wf-1")
    wf.step("a", "echo", {"n": 1})
    await producer.publish_workflow(wf)
    lane = keys.lane("normal")
    ((_, entries),) = await redis.xreadgroup("workers", "w1", {lane: ">"}, count=1)
    entry_id, raw = entries[0]
    await starter.start(keys, lane, "normal", [ClaimedWorkflow(entry_id, "wf-1", JobRequest.from_fields(raw), raw)])


async def attempt_failed(redis: Redis, keys: Keys, delay_ms: int) -> tuple[str, str]:
    """Step a's next entry started by w1 and its attempt failed: its retry is settled into the delayed set as jobs.py
    settles one. Returns the entry and the delayed set's member."""
    lane, entry_id, scripts = await started_by_w1(redis, keys, STEP)
    ((_, fields),) = await redis.xrange(lane, entry_id, entry_id)
    member = orjson.dumps({"lane": "normal", "id": STEP, "fields": {**fields, "id": STEP, "source_id": entry_id}}).decode()
    retry = retry_op(lane, entry_id, f"normal/{entry_id}", STEP, delay_ms, member, "boom")
    args = [keys.job_prefix, "workers", 1_048_576, 60, f"{keys.prefix}:requests:", orjson.dumps([retry.op]).decode()]
    assert await scripts.settle(keys=[keys.results, keys.dead, keys.delayed, keys.slot_guard], args=args) == [1]
    return entry_id, member


async def new_run_after_expiry(redis: Redis, keys: Keys, producer: Producer, starter: WorkflowStarter) -> str:
    """wf-1's state expired (its TTL passed: the keys are gone) and a new run of wf-1 published step a; its entry."""
    await redis.delete(keys.workflow("wf-1"), keys.job("wf-1"))
    await run_workflow(redis, keys, producer, starter)
    new_entry = [e for e, f in await redis.xrange(keys.lane("normal")) if f.get("id") == STEP][-1]
    assert await redis.hget(keys.job(STEP), "source") == f"normal/{new_entry}"
    return new_entry


def a_starter(redis: Redis, settings: StreamSettings) -> WorkflowStarter:
    return WorkflowStarter(redis, settings, group="workers", worker="w1", checker=Echo(), reject=lambda *a: None,
                           release=lambda stream, entry_id: None)


async def test_an_earlier_runs_retry_leaves_the_new_runs_step_alone(redis: Redis, keys: Keys, producer: Producer, settings: StreamSettings) -> None:
    # Given wf-1's step a, whose first attempt failed: its retry (due at once) waits in the delayed set
    starter = a_starter(redis, settings)
    await run_workflow(redis, keys, producer, starter)
    await attempt_failed(redis, keys, 0)
    # And a new run of wf-1 after wf-1's state expired, its step a queued
    new_entry = await new_run_after_expiry(redis, keys, producer, starter)
    lane = keys.lane("normal")
    # When a worker's upkeep promotes due retries
    await Upkeep(Scripts(redis), starter, settings, [keys], UpkeepLease(Scripts(redis), "w1")).run()
    # Then the old retry is gone, not re-added to the lane, and the step's record still names the new run's entry,
    # which runs as the step's attempt 1
    assert await redis.zcard(keys.delayed) == 0
    assert [e for e, _ in await redis.xrange(lane) if e > new_entry] == []
    assert await redis.hget(keys.job(STEP), "source") == f"normal/{new_entry}"
    ((_, entries),) = await redis.xreadgroup("workers", "w1", {lane: ">"}, count=1)
    assert entries[0][0] == new_entry
    entry = [new_entry, STEP, "echo", "1", "3", "", "1", "", "", ""]
    started = await Scripts(redis).start(keys=[lane, keys.slot_guard],
                                         args=[keys.job_prefix, "normal", 1_700_000_000_200, "w1", orjson.dumps([entry]).decode()])
    assert [row[:2] for row in started] == [["run", 1]]


async def test_an_earlier_runs_retry_leaves_the_new_runs_retry_alone(redis: Redis, keys: Keys, producer: Producer, settings: StreamSettings) -> None:
    # Given wf-1's step a, whose first attempt failed: its retry (due at once) waits in the delayed set
    starter = a_starter(redis, settings)
    await run_workflow(redis, keys, producer, starter)
    await attempt_failed(redis, keys, 0)
    # And a new run of wf-1 after wf-1's state expired, whose step a failed its first attempt too: retrying, due later
    await new_run_after_expiry(redis, keys, producer, starter)
    _, new_member = await attempt_failed(redis, keys, LATER_MS)
    record = await redis.hgetall(keys.job(STEP))
    # When a worker's upkeep promotes due retries (the earlier run's only)
    await Upkeep(Scripts(redis), starter, settings, [keys], UpkeepLease(Scripts(redis), "w1")).run()
    # Then the earlier run's retry is dropped, not re-added to the lane; the new run's still waits, its record untouched
    assert await redis.zrange(keys.delayed, 0, -1) == [new_member]
    assert await redis.hgetall(keys.job(STEP)) == record
    assert (await redis.xinfo_groups(keys.lane("normal")))[0]["lag"] == 0
