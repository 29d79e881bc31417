"""One script call does a bounded share of workflow work (workflow.lua: WF_CALL_WORK) and leaves the rest to the next
call, so Redis answers its other clients in between: a settle batch whose steps publish wide fan-outs of large inputs,
and an expiry of many large workflows, each go in several calls, every op and workflow exactly once.

Before, one settle call published the dependents of 50 wide workflows' roots (~820 MB of inputs) and held Redis ~11 s,
BUSY for every client; one expiry of 100 workflows of 1,000 steps held it 0.9 - 1.4 s."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from streams.config import StreamSettings
from streams.connection import connect
from streams.embedded import RedisServer
from streams.envelope import JobRequest
from streams.keys import Keys
from streams.producer import Producer
from streams.settle import Settler, done_op
from streams.workflow import Workflow, step_job_id
from streams.workflows import ClaimedWorkflow, WorkflowStarter
from tests.streams.test_resent_calls import Echo

WIDE = 4  # workflows
DEPENDENTS = 300  # each copies its root's 16 KB result: ~4.8 MB of inputs a root's settle, past one call's share
ROOT_RESULT = orjson.dumps({"blob": "x" * 16_000}).decode()


OwnRedis = tuple[Redis, Keys, StreamSettings]


@pytest.fixture
async def own(own_redis: RedisServer, prefix: str) -> AsyncIterator[OwnRedis]:
    """A client of the test's own Redis (its script stats are the test's alone), with the prefix's keys and settings."""
    redis = connect(own_redis.url)
    yield redis, Keys(prefix), StreamSettings(redis_url=own_redis.url, prefix=prefix)
    await redis.aclose()


async def _evalsha_calls(redis: Redis) -> int:
    """Script calls that ran: not a first call's NOSCRIPT, after which the client loads the script and calls again."""
    stats = (await redis.info("commandstats")).get("cmdstat_evalsha", {})
    return int(stats.get("calls", 0)) - int(stats.get("failed_calls", 0)) - int(stats.get("rejected_calls", 0))


async def _start_all(redis: Redis, keys: Keys, settings: StreamSettings, workflows: list[Workflow]) -> None:
    """Publish the workflows and start them as a worker would: their first steps go to the normal lane."""
    producer = Producer(redis, keys)
    for wf in workflows:
        await producer.publish_workflow(wf)
    lane = keys.lane("normal")
    ((_, entries),) = await redis.xreadgroup("workers", "w1", {lane: ">"}, count=len(workflows))
    starter = WorkflowStarter(redis, settings, group="workers", worker="w1", checker=Echo(), reject=lambda *a: None,
                              release=lambda stream, entry_id: None)
    claimed = [ClaimedWorkflow(eid, raw["id"], JobRequest.from_fields(raw), raw) for eid, raw in entries]
    await starter.start(keys, lane, "normal", claimed)


async def _started_fan_outs(redis: Redis, keys: Keys, settings: StreamSettings, name: str, count: int,
                            dependents: int) -> list[tuple[str, dict[str, str]]]:
    """``count`` running workflows, each a root step with ``dependents`` after it; their roots' lane entries, claimed."""
    workflows = []
    for n in range(count):
        wf = Workflow(f"{name}-{n}")
        wf.step("root", "echo", {})
        for d in range(dependents):
            wf.step(f"d{d}", "echo", {}, after="root")
        workflows.append(wf)
    await _start_all(redis, keys, settings, workflows)
    ((_, roots),) = await redis.xreadgroup("workers", "w1", {keys.lane("normal"): ">"}, count=count + 10)
    assert sorted(raw["id"] for _, raw in roots) == sorted(step_job_id(f"{name}-{n}", "root") for n in range(count))
    return roots


async def _settle_roots(redis: Redis, keys: Keys, settings: StreamSettings, roots: list[tuple[str, dict[str, str]]],
                        result: str) -> tuple[list[tuple[str, bool]], int, int]:
    """Settle the roots completed with ``result`` in one batch: (what was released, script calls, bytes sent)."""
    lane = keys.lane("normal")
    done: list[tuple[str, bool]] = []
    settler = Settler(redis, keys, group="workers", max_result_bytes=settings.max_result_bytes, job_ttl_s=3600,
                      release=lambda stream, entry_id, settled=True: done.append((entry_id, settled)))
    for eid, raw in roots:
        fields: dict[str, Any] = {"id": raw["id"], "agent": "echo", "status": "completed", "result": result,
                                  "attempts": "1", "parent": raw["parent"], "step": "root"}
        settler.submit(done_op(lane, eid, f"normal/{eid}", raw["id"], fields, None, parent=raw["parent"], step="root"))
    calls, sent = await _evalsha_calls(redis), int((await redis.info("stats"))["total_net_input_bytes"])
    task = asyncio.create_task(settler.run())
    async with asyncio.timeout(60):
        await settler.close(task)
    calls, sent = await _evalsha_calls(redis) - calls, int((await redis.info("stats"))["total_net_input_bytes"]) - sent
    assert sorted(done) == sorted((eid, True) for eid, _ in roots), done  # each settled once
    return done, calls, sent


def _dependents_published(entries: list[tuple[str, dict[str, str]]]) -> list[dict[str, str]]:
    return [raw for _, raw in entries if raw.get("step", "").startswith("d")]


async def test_a_settle_batch_of_wide_fan_outs_goes_in_several_calls_each_op_once(own: OwnRedis) -> None:
    # Given four running workflows, each a root step with 300 dependents, their roots claimed by a worker
    redis, keys, settings = own
    roots = await _started_fan_outs(redis, keys, settings, "wide", WIDE, DEPENDENTS)
    # When their results, each 16 KB, are settled in one batch
    _, calls, _ = await _settle_roots(redis, keys, settings, roots, ROOT_RESULT)
    # Then each root is settled once, in a call of its own (its fan-out alone passes a call's share)
    assert calls >= WIDE, f"{calls} settle calls for {WIDE} roots whose fan-outs each pass a call's share"
    # And every dependent is published once, with its root's result as its inputs
    published = _dependents_published(await redis.xrange(keys.lane("normal")))
    assert len(published) == WIDE * DEPENDENTS
    assert len({raw["id"] for raw in published}) == WIDE * DEPENDENTS
    assert orjson.loads(published[0]["inputs"]) == {"root": orjson.loads(ROOT_RESULT)}
    assert {await redis.hget(keys.job(f"wide-{n}"), "status") for n in range(WIDE)} == {"running"}


async def test_an_expiry_of_many_large_workflows_goes_in_several_calls_each_once(own: OwnRedis) -> None:
    # Given six running workflows of 1,000 queued steps, their timeouts passed
    redis, keys, settings = own
    workflows = []
    for n in range(6):
        wf = Workflow(f"big-{n}", timeout_s=3600)
        for s in range(1000):
            wf.step(f"s{s}", "echo", {})
        workflows.append(wf)
    await _start_all(redis, keys, settings, workflows)
    for wf in workflows:
        assert await redis.zadd(keys.workflow_timeouts, {wf.id: 0}, xx=True, ch=True) == 1
    starter = WorkflowStarter(redis, settings, group="workers", worker="w1", checker=Echo(), reject=lambda *a: None,
                              release=lambda stream, entry_id: None)
    before = await _evalsha_calls(redis)
    # When a worker's upkeep ends those due
    ended = await starter.expire_due(keys)
    calls = await _evalsha_calls(redis) - before
    # Then all six end expired, each with one result event, in more than one call
    assert ended == 6
    assert {await redis.hget(keys.job(wf.id), "status") for wf in workflows} == {"expired"}
    events = [raw for _, raw in await redis.xrange(keys.results) if raw.get("agent") == "workflow"]
    assert sorted(raw["id"] for raw in events) == sorted(wf.id for wf in workflows)
    assert calls >= 2, f"{calls} expiry calls for 6,000 steps, ~1,000 a workflow's end"
    assert await redis.zcard(keys.workflow_timeouts) == 0


async def test_a_batch_split_over_calls_is_sent_about_once(own: OwnRedis) -> None:
    # Given 16 running workflows, each a root with 9 dependents, their roots claimed, and each root's result 0.5 MB:
    # a root's fan-out (4.5 MB of inputs) passes a call's share, so each call settles one root
    redis, keys, settings = own
    roots = await _started_fan_outs(redis, keys, settings, "heavy", 16, 9)
    result = orjson.dumps(["y" * 500_000]).decode()
    # When they are settled in one batch
    _, _, sent = await _settle_roots(redis, keys, settings, roots, result)
    # Then each is settled once, and the batch went to Redis about once, not its rest again with every call
    # (before: 16 + 15 + ... + 1 halves of a MB, ~70 MB)
    batch_bytes = 16 * len(orjson.dumps(result))
    assert sent < 3 * batch_bytes, f"{sent:,} bytes sent for a batch of {batch_bytes:,}"
    assert len(_dependents_published(await redis.xrange(keys.lane("normal")))) == 16 * 9
