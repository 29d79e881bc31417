"""Reads that show neither a job's result nor its steps read neither: GET /jobs/{id}/status, an event stream's polls
while the job's state stays the one last sent, and the tenant check that makes another tenant's id a 404. They read
the record's head (one HMGET); the whole record (HGETALL, the result parsed, a workflow's steps listed) is read only
for an answer that shows it."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any

import httpx
import orjson

from streams.connection import connect
from streams.embedded import RedisServer
from streams.keys import Keys
from tests.consumers.gateway.support import GatewayFactory, sse_events
from tests.support import wait_until

KEYS = {"STREAMCREW_API_KEYS": "key-a:acme,key-b:globex"}
# ~30 MB of empty lists: a few seconds of parsing (0.86 MiB of them took ~0.12 s), had a read parsed it
HUGE_RESULT = "[" + "[]," * 10_000_000 + "[]]"
T0 = 1_700_000_000_000


async def _calls(redis: Any) -> dict[str, int]:
    stats = await redis.info("commandstats")
    return {name: int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in ("hgetall", "hmget", "hget")}


async def _since(redis: Any, before: dict[str, int]) -> dict[str, int]:
    after = await _calls(redis)
    return {name: after[name] - before[name] for name in after}


@asynccontextmanager
async def _following(client: httpx.AsyncClient, path: str, headers: dict[str, str] | None = None) -> AsyncIterator[
        tuple[list[dict[str, str]], asyncio.Task[None]]]:
    """The events of the stream at ``path`` as they arrive, read by a task (cancelled when the block ends)."""
    seen: list[dict[str, str]] = []
    async with sse_events(client, path, headers=headers) as events:
        async def follow() -> None:
            async for event in events:
                seen.append(event)

        follower = asyncio.create_task(follow())
        try:
            yield seen, follower
        finally:
            follower.cancel()
            with suppress(asyncio.CancelledError):
                await follower


async def test_status_reads_only_the_records_head(gateways: GatewayFactory, own_redis: RedisServer, keys: Keys) -> None:
    # Given acme's ended job whose stored result is ~30 MB of JSON, and a running one whose result is no JSON at all
    redis = connect(own_redis.url)
    try:
        await redis.hset(keys.job("huge"), mapping={
            "status": "completed", "agent": "echo", "attempts": "1", "tenant": "acme", "result": HUGE_RESULT,
            "submitted_at": str(T0), "started_at": str(T0 + 250), "finished_at": str(T0 + 1250)})
        await redis.hset(keys.job("garbled"), mapping={
            "status": "running", "agent": "echo", "attempts": "2", "tenant": "acme", "result": "{not json" * 100_000,
            "submitted_at": str(T0), "started_at": str(T0 + 10)})
        gateway = await gateways.start(KEYS, redis_url=own_redis.url)
        async with gateway.client("key-a") as acme, gateway.client("key-b") as globex:
            before = await _calls(redis)
            # When acme asks for their status 20 times at once
            started = time.monotonic()
            answers = await asyncio.gather(*(acme.get(f"/jobs/{job}/status") for job in ("huge", "garbled") for _ in range(10)))
            took = time.monotonic() - started
            # Then each answers at once with the times as stored
            assert [a.status_code for a in answers] == [200] * 20, [a.text[:200] for a in answers]
            assert answers[0].json() == {"job_id": "huge", "status": "completed", "queued_at": "2023-11-14T22:13:20.000+00:00",
                                         "started_at": "2023-11-14T22:13:20.250+00:00", "completed_at": "2023-11-14T22:13:21.250+00:00"}
            assert answers[10].json() == {"job_id": "garbled", "status": "running", "queued_at": "2023-11-14T22:13:20.000+00:00",
                                          "started_at": "2023-11-14T22:13:20.010+00:00", "completed_at": None}
            assert took < 3, f"20 status reads took {took:.2f}s"
            # And globex gets 404 for that id on every read route
            for path in ("/jobs/huge", "/jobs/huge/result", "/jobs/huge/status", "/jobs/huge/events"):
                refused = await globex.get(path)
                assert refused.status_code == 404 and refused.json()["error"]["code"] == "job_not_found", (path, refused.text)
            # And none of these reads fetched a whole record: each read the head alone
            calls = await _since(redis, before)
            assert calls["hgetall"] == 0 and calls["hmget"] >= 24, calls
            # And a read that shows the result still shows it whole
            shown = await acme.get("/jobs/garbled")
            assert shown.status_code == 200 and shown.json()["result"] == "{not json" * 100_000
    finally:
        await redis.aclose()


async def test_event_stream_polls_read_the_whole_record_only_for_an_event(
    gateways: GatewayFactory, own_redis: RedisServer, keys: Keys,
) -> None:
    # Given acme's running job whose stored result is ~30 MB of JSON
    redis = connect(own_redis.url)
    try:
        await redis.hset(keys.job("polled"), mapping={
            "status": "running", "agent": "echo", "attempts": "1", "tenant": "acme", "result": HUGE_RESULT,
            "submitted_at": str(T0), "started_at": str(T0 + 10)})
        gateway = await gateways.start(KEYS, redis_url=own_redis.url)
        async with gateway.client("key-a") as acme:
            before = await _calls(redis)
            # When acme follows it, having seen its running state, while it stays running
            async with _following(acme, "/jobs/polled/events", {"Last-Event-ID": "1-running"}) as (seen, follower):
                await asyncio.sleep(1.0)  # poll every 0.02 - 0.1 s
                quiet = await _since(redis, before)
                # Then its polls read the record's head alone, and send nothing
                assert quiet["hgetall"] == 0 and quiet["hmget"] >= 8, quiet
                assert seen == []
                # And when its state changes, each change is sent with the whole record, read once for it
                await redis.hset(keys.job("polled"), mapping={"status": "retrying", "error": "boom", "result": '{"partial": 1}'})
                await wait_until(lambda: len(seen) == 1, timeout=5, what="the retrying event")
                await redis.hset(keys.job("polled"), mapping={"status": "running", "attempts": "2"})
                await wait_until(lambda: len(seen) == 2, timeout=5, what="the second running event")
                await asyncio.sleep(0.5)
                await redis.hset(keys.job("polled"), mapping={
                    "status": "completed", "result": '{"ok": true}', "finished_at": str(T0 + 5000)})
                await asyncio.wait_for(follower, 5)
        assert [e["id"] for e in seen] == ["1-retrying", "2-running", "2-completed"], seen
        retrying, last = json.loads(seen[0]["data"]), json.loads(seen[-1]["data"])
        assert retrying["result"] == {"partial": 1} and retrying["error"] == "boom", retrying
        assert last["status"] == "completed" and last["result"] == {"ok": True} and last["finished_at"] == T0 + 5000, last
        assert (await _since(redis, before))["hgetall"] == 3
    finally:
        await redis.aclose()


async def test_a_workflows_steps_are_read_only_for_an_answer_that_lists_them(
    gateways: GatewayFactory, own_redis: RedisServer, keys: Keys,
) -> None:
    # Given acme's running workflow of three steps, none settled
    redis = connect(own_redis.url)
    try:
        wf = keys.workflow("wf-light")
        await redis.hset(wf, mapping={"order": orjson.dumps(["a", "b", "c"]).decode(),
                                      **{f"{s}|st": "pending" for s in "abc"}, **{f"{s}|agent": "echo" for s in "abc"}})
        await redis.hset(keys.job("wf-light"), mapping={
            "status": "running", "agent": "workflow", "attempts": "1", "tenant": "acme", "steps_total": "3", "steps_done": "0",
            "submitted_at": str(T0), "started_at": str(T0)})
        gateway = await gateways.start(KEYS, redis_url=own_redis.url)
        async with gateway.client("key-a") as acme:
            before = await _calls(redis)
            # When its status is read, and its event stream followed from the state last seen
            status = await acme.get("/jobs/wf-light/status")
            async with _following(acme, "/jobs/wf-light/events?last_event_id=1-running-0") as (seen, _):
                await asyncio.sleep(1.0)
                quiet = await _since(redis, before)
                # Then neither read its steps (get_steps' HGET of their order) nor the whole record
                assert status.status_code == 200 and status.json()["status"] == "running", status.text
                assert quiet["hgetall"] == 0 and quiet["hget"] == 0, quiet
                # And a settled step is an event that lists the steps
                await redis.hset(wf, "a|st", "completed")
                await redis.hset(keys.job("wf-light"), "steps_done", "1")
                await wait_until(lambda: len(seen) == 1, timeout=5, what="the step's event")
        event = json.loads(seen[0]["data"])
        assert seen[0]["id"] == "1-running-1" and event["steps_done"] == 1, seen
        assert [(s["id"], s["status"]) for s in event["steps"]] == [("a", "completed"), ("b", "pending"), ("c", "pending")]
    finally:
        await redis.aclose()
