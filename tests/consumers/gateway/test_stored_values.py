"""Reads show a job record as stored, also one a raw writer put there: a number no JSON reader or
calendar can carry reads as null, never as a 500."""

from __future__ import annotations

import json

from streams.keys import Keys
from streams.strict_json import MAX_SHOWN_DEPTH
from tests.consumers.gateway.support import GatewayFactory, sse_events

YEAR_58888 = 1796163777734000  # microseconds stored as milliseconds: an epoch ms no datetime holds
OVER_64_BITS = 99999999999999999999999  # an integer orjson refuses to write


async def test_out_of_range_numbers_in_a_stored_record_read_as_null(gateways: GatewayFactory, redis, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    # Given two records a raw writer stored with HSET: an ended job with times out of range, and a queued one
    await redis.hset(keys.job("raw-ended"), mapping={
        "status": "completed", "agent": "echo", "attempts": "1", "result": '{"ok": true}',
        "submitted_at": str(YEAR_58888), "started_at": str(YEAR_58888), "finished_at": str(OVER_64_BITS)})
    await redis.hset(keys.job("raw-queued"), mapping={
        "status": "queued", "agent": "echo", "attempts": str(OVER_64_BITS), "submitted_at": str(OVER_64_BITS)})
    gateway = await gateways.start()
    async with gateway.client() as client:
        # When every read route is asked for them
        ended = await client.get("/jobs/raw-ended")
        ended_times = await client.get("/jobs/raw-ended/status")
        ended_result = await client.get("/jobs/raw-ended/result")
        queued = await client.get("/jobs/raw-queued")
        queued_times = await client.get("/jobs/raw-queued/status")
        queued_result = await client.get("/jobs/raw-queued/result")
        repeated = await client.post("/jobs", json={"agent": "echo", "data": {}, "id": "raw-queued"})

        # Then each answers: what JSON can carry as stored, a number beyond 64 bits as null
        assert ended.status_code == 200, ended.text
        assert ended.json()["submitted_at"] == YEAR_58888 and ended.json()["finished_at"] is None
        assert ended_result.status_code == 200, ended_result.text
        assert ended_result.json()["result"] == {"ok": True} and ended_result.json()["finished_at"] is None
        assert queued.status_code == 200 and queued_result.status_code == 202 and repeated.status_code == 200, (queued.text, repeated.text)
        for answer in (queued, queued_result, repeated):
            assert answer.json()["attempts"] is None and answer.json()["submitted_at"] is None, answer.text
        # And a time no datetime holds reads as null in ISO 8601
        assert ended_times.status_code == 200, ended_times.text
        assert ended_times.json() == {"job_id": "raw-ended", "status": "completed", "queued_at": None, "started_at": None, "completed_at": None}
        assert queued_times.status_code == 200 and queued_times.json()["queued_at"] is None, queued_times.text
        # And the event stream carries the same record
        async with sse_events(client, "/jobs/raw-queued/events") as events:
            first = await anext(events)
        assert json.loads(first["data"])["status"] == "queued" and json.loads(first["data"])["attempts"] is None


async def test_stored_fields_not_of_their_type_read_as_unset(gateways: GatewayFactory, redis, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    # Given a record a raw writer stored with words where numbers belong and a usage that is no object
    await redis.hset(keys.job("raw-words"), mapping={
        "status": "running", "agent": "echo", "attempts": "abc", "started_at": "soon", "steps_total": "many",
        "usage": "[1, 2]", "result": "not json"})
    gateway = await gateways.start()
    async with gateway.client() as client:
        # When it is read
        got = await client.get("/jobs/raw-words")
        # Then it answers with those fields unset (left out, attempts 0) and the rest as stored, never a 500
        assert got.status_code == 200, got.text
        body = got.json()
        assert (body["status"], body["agent"], body["result"]) == ("running", "echo", "not json")
        assert body["attempts"] == 0 and "started_at" not in body and "usage" not in body and "steps_total" not in body, body


def _nested(levels: int) -> object:
    value: object = 1
    for _ in range(levels):
        value = {"k": value}
    return value


async def test_a_result_nested_deeper_than_orjson_writes_is_answered_whole(gateways: GatewayFactory, redis, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    # Given a workflow's record whose result wraps a step's output of 252 levels (the step's own was writable; the
    # workflow's steps/<id>/result around it go past the 254 levels orjson writes)
    deep = _nested(252)
    await redis.hset(keys.job("wf-deep"), mapping={
        "status": "completed", "agent": "workflow", "attempts": "1", "finished_at": "1",
        "result": json.dumps({"steps": {"a": {"status": "completed", "result": deep}}})})
    gateway = await gateways.start()
    async with gateway.client() as client:
        # When its record, its result and its event stream are read
        record = await client.get("/jobs/wf-deep")
        result = await client.get("/jobs/wf-deep/result")
        async with sse_events(client, "/jobs/wf-deep/events") as events:
            first = await anext(events)
    # Then each carries the result whole (they answered 500, and the stream broke off)
    for answer in (record, result):
        assert answer.status_code == 200, answer.text
        assert answer.json()["result"]["steps"]["a"]["result"] == deep
    assert json.loads(first["data"])["result"]["steps"]["a"]["result"] == deep


async def test_a_record_without_a_known_status_reads_as_no_job(gateways: GatewayFactory, redis, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    # Given records a raw writer stored with HSET for tenant globex: one without a status, one with a status no script writes
    await redis.hset(keys.job("nostatus"), mapping={"agent": "echo", "attempts": "1", "tenant": "globex"})
    await redis.hset(keys.job("oddstatus"), mapping={"status": "paused", "agent": "echo", "attempts": "1", "tenant": "globex"})
    gateway = await gateways.start({"STREAMCREW_API_KEYS": "k-operator,k-acme:acme,k-globex:globex"})
    async with gateway.client("k-operator") as operator, gateway.client("k-acme") as acme, gateway.client("k-globex") as globex:
        # When any key asks for them on every read route
        for client in (operator, acme, globex):
            for job_id in ("nostatus", "oddstatus"):
                for path in (f"/jobs/{job_id}", f"/jobs/{job_id}/result", f"/jobs/{job_id}/status", f"/jobs/{job_id}/events"):
                    answer = await client.get(path)
                    # Then it is 404 job_not_found as for an unknown id (a 500 before, which told acme a record exists)
                    assert answer.status_code == 404, (path, answer.text)
                    assert answer.json()["error"]["code"] == "job_not_found"
        # And a job sent with the id of the record without status is queued over it, as publish.lua takes it for none
        posted = await globex.post("/jobs", json={"agent": "echo", "data": {}, "id": "nostatus"})
        assert posted.status_code == 202, posted.text
        got = await globex.get("/jobs/nostatus")
        assert got.status_code == 200 and got.json()["status"] == "queued", got.text


def test_an_events_data_is_one_line_whatever_line_breaks_its_text_holds() -> None:
    from consumers.gateway.sse import sse_json

    # Given a record whose result holds the characters str.splitlines() breaks on that JSON leaves as they are
    body = {"job_id": "j", "result": {"text": "a\u2028b\u2029c\x85d"}}
    # When it is written as an event's data
    data = sse_json(body)
    # Then it is one line (FastAPI's SSE writer split data on them in releases pyproject allows: broken JSON) ...
    assert len(data.splitlines()) == 1, data
    # ... which reads back as the record
    assert json.loads(data) == body


async def test_a_result_nested_past_what_the_gateway_writes_is_answered_as_its_stored_text(gateways: GatewayFactory, redis, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    # Given records whose result is 900 levels deep, as settle.lua copies a raw XADD's result (orjson reads it,
    # no writer in the gateway writes it back: past Python's recursion limit), and one at the 512 levels still shown parsed
    deep, deepest = "[" * 900 + "]" * 900, "[" * MAX_SHOWN_DEPTH + "]" * MAX_SHOWN_DEPTH
    for job_id, result in (("raw-deep", deep), ("raw-deepest", deepest)):
        await redis.hset(keys.job(job_id), mapping={
            "status": "completed", "agent": "echo", "attempts": "1", "finished_at": "1", "result": result})
    gateway = await gateways.start()
    async with gateway.client() as client:
        # When their records, results and event streams are read
        answers = {job_id: [await client.get(f"/jobs/{job_id}"), await client.get(f"/jobs/{job_id}/result")]
                   for job_id in ("raw-deep", "raw-deepest")}
        for job_id in answers:
            async with sse_events(client, f"/jobs/{job_id}/events") as events:
                first = await anext(events)
            assert first["event"] == "status", first
            answers[job_id].append(json.loads(first["data"]))
    # Then each answers whole: the 900 levels as the stored JSON text, as the notifier delivers it (it answered 500,
    # and the event stream broke off), the 512 levels as JSON
    for job_id, shown in (("raw-deep", deep), ("raw-deepest", json.loads(deepest))):
        record, result, event = answers[job_id]
        for answer in (record, result):
            assert answer.status_code == 200, answer.text
            assert answer.json()["status"] == "completed" and answer.json()["result"] == shown
        assert event["result"] == shown
