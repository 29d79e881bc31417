"""The job lifecycle over HTTP against a real gateway process and a real worker."""

from __future__ import annotations

import asyncio
import json

import httpx

from streams.keys import Keys
from tests.consumers.gateway.support import GatewayFactory, sse_events
from tests.support import WorkerFactory, wait_until

TERMINAL = {"completed", "failed", "rejected", "expired"}


async def test_full_lifecycle_202_status_events_result(gateways: GatewayFactory, workers: WorkerFactory) -> None:
    # Given a gateway and a worker
    gateway = await gateways.start()
    workers.start("--concurrency", "50")
    async with gateway.client() as client:
        # When a job is submitted
        posted = await client.post("/jobs", json={"agent": "echo", "data": {"hello": "world", "sleep_s": 0.3}, "priority": 8})
        # Then it is accepted at once with its id, status and links
        assert posted.status_code == 202, posted.text
        body = posted.json()
        job_id = body["job_id"]
        assert body["status"] == "queued" and body["lane"] == "high"
        assert body["links"] == {"self": f"/jobs/{job_id}", "result": f"/jobs/{job_id}/result", "events": f"/jobs/{job_id}/events"}
        assert posted.headers["location"] == f"/jobs/{job_id}"

        status = await client.get(f"/jobs/{job_id}")
        assert status.status_code == 200
        assert status.json()["job_id"] == job_id and status.json()["status"] in {"queued", "running", "completed"}

        # And its events stream shows it running, then completed, and closes
        seen: list[dict[str, str]] = []
        async with sse_events(client, f"/jobs/{job_id}/events") as events:
            async for event in events:
                seen.append(event)
        statuses = [httpx.Response(200, content=e["data"]).json()["status"] for e in seen]
        assert statuses[-1] == "completed", statuses
        assert "running" in statuses, statuses
        assert all(e["event"] == "status" for e in seen)
        assert seen[-1]["id"] == "1-completed"
        assert len({e["id"] for e in seen}) == len(seen), "every event names a distinct state"

        # And the result is there
        result = await client.get(f"/jobs/{job_id}/result")
        assert result.status_code == 200
        assert result.json()["status"] == "completed"
        assert result.json()["result"] == {"echo": {"hello": "world", "sleep_s": 0.3}}
        assert result.json()["attempts"] == 1

        # And a client that already saw the end is told there is nothing more (204 stops EventSource)
        again = await client.get(f"/jobs/{job_id}/events", headers={"Last-Event-ID": "1-completed"})
        assert again.status_code == 204 and again.content == b""


async def test_events_resume_after_last_event_id(gateways: GatewayFactory, workers: WorkerFactory) -> None:
    # Given a queued job and no worker yet
    gateway = await gateways.start()
    async with gateway.client() as client:
        job_id = (await client.post("/jobs", json={"agent": "echo", "data": {}, "id": "resume-1"})).json()["job_id"]
        pending = await client.get(f"/jobs/{job_id}/result")
        assert pending.status_code == 202 and pending.json()["status"] == "queued"

        # When a client reconnects having seen the queued state, and a worker then runs the job
        seen: list[dict[str, str]] = []
        async with sse_events(client, f"/jobs/{job_id}/events", headers={"Last-Event-ID": "0-queued"}) as events:
            workers.start("--concurrency", "50")
            async for event in events:
                seen.append(event)
        # Then the queued state is not sent again, and the stream ends with the completed one
        assert seen, "no events"
        assert all(e["id"] != "0-queued" for e in seen)
        assert seen[-1]["id"] == "1-completed"

        # And reconnecting with an earlier id sends the current state at once
        async with sse_events(client, f"/jobs/{job_id}/events?last_event_id=0-queued") as events:
            replayed = [e async for e in events]
        assert [e["id"] for e in replayed] == ["1-completed"]


async def test_repeated_id_answers_200_with_the_same_job(gateways: GatewayFactory, workers: WorkerFactory, redis, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    gateway = await gateways.start()
    async with gateway.client() as client:
        # Given a job submitted with an id
        request = {"agent": "echo", "data": {"n": 1}, "id": "ORD-12345-status"}
        first = await client.post("/jobs", json=request)
        assert first.status_code == 202
        # When the same id is submitted again, before and after it ran
        second = await client.post("/jobs", json={**request, "data": {"n": 2}})
        assert second.status_code == 200
        assert second.json()["job_id"] == "ORD-12345-status" and second.json()["status"] == "queued"

        workers.start("--concurrency", "50")

        async def done() -> bool:
            return (await client.get("/jobs/ORD-12345-status/result")).status_code == 200

        await wait_until(done, timeout=15, what="the job to finish")
        third = await client.post("/jobs", json=request)
        # Then each repeat answers 200 with the one existing job, which ran once with the first data
        assert third.status_code == 200
        assert third.json()["status"] == "completed" and third.json()["result"] == {"echo": {"n": 1}}
        assert await redis.xlen(keys.results) == 1


async def test_unknown_job_is_404_everywhere(gateways: GatewayFactory) -> None:
    gateway = await gateways.start()
    async with gateway.client() as client:
        for path in ("/jobs/nope", "/jobs/nope/result", "/jobs/nope/events"):
            response = await client.get(path)
            assert response.status_code == 404, path
            assert response.json()["error"]["code"] == "job_not_found"
        unknown_route = await client.get("/no/such/route")
        assert unknown_route.status_code == 404 and unknown_route.json()["error"]["code"] == "not_found"
        wrong_method = await client.delete("/jobs")
        assert wrong_method.status_code == 405 and wrong_method.json()["error"]["code"] == "method_not_allowed"


async def test_concurrent_submissions_keep_per_request_answers(gateways: GatewayFactory, redis, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    # Given a gateway with a 2 KB encoded-request cap
    gateway = await gateways.start({"STREAMCREW_MAX_REQUEST_BYTES": "2000"})
    async with gateway.client() as client:
        # When 40 requests for one id, 30 distinct jobs and one oversized request arrive at once
        same = [client.post("/jobs", json={"agent": "echo", "data": {"i": i}, "id": "same"}) for i in range(40)]
        distinct = [client.post("/jobs", json={"agent": "echo", "data": {"i": i}}) for i in range(30)]
        oversized = client.post("/jobs", json={"agent": "echo", "data": {"blob": "x" * 3000}})
        answers = await asyncio.gather(*same, oversized, *distinct)
    # Then the id was created once, each distinct job once, and only the oversized request failed
    same_codes = sorted(r.status_code for r in answers[:40])
    assert same_codes == [200] * 39 + [202]
    assert answers[40].status_code == 413 and answers[40].json()["error"]["code"] == "request_too_large"
    assert {r.status_code for r in answers[41:]} == {202}
    assert len({r.json()["job_id"] for r in answers[41:]}) == 30
    assert await redis.xlen(keys.lane("normal")) == 31


TRACE_ID, PARENT_ID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"


async def test_a_traceparent_the_w3c_spec_calls_invalid_is_not_carried(gateways: GatewayFactory) -> None:
    # Given a gateway, and traceparent headers paired with what the W3C trace context spec has a reader take from them
    valid = f"00-{TRACE_ID}-{PARENT_ID}-01"
    later = f"01-{TRACE_ID}-{PARENT_ID}-01"
    headers = {
        valid: valid,
        f"ff-{TRACE_ID}-{PARENT_ID}-01": None,  # version ff is invalid
        f"00-{'0' * 32}-{PARENT_ID}-01": None,  # an all-zero trace-id
        f"00-{TRACE_ID}-{'0' * 16}-01": None,  # an all-zero parent-id
        f"00-{TRACE_ID}-{PARENT_ID}-01-more": None,  # version 00 is 55 characters, no more
        f"{later}-more": later,  # a later version may carry more after a '-': its first 55 characters are parsed
        f"{later}more": None,  # ... but after a '-' only
        later: later,
    }
    gateway = await gateways.start()
    async with gateway.client() as client:
        for n, (header, carried) in enumerate(headers.items()):
            # When a job is sent with it
            posted = await client.post("/jobs", json={"agent": "echo", "data": {}, "id": f"tp-{n}"}, headers={"traceparent": header})
            assert posted.status_code == 202, posted.text
            # Then its record carries what the spec reads, and none for a value it says to ignore (those were stored)
            record = (await client.get(f"/jobs/tp-{n}")).json()
            assert record.get("traceparent") == carried, (header, record)


async def test_a_status_record_shows_job_id_first_and_links_last(gateways: GatewayFactory) -> None:
    # Given a gateway and a queued job (no worker)
    gateway = await gateways.start()
    async with gateway.client() as client:
        assert (await client.post("/jobs", json={"agent": "echo", "data": {}, "id": "in-order"})).status_code == 202
        # When its record is read, waited on, sent again and streamed
        answers = [await client.get("/jobs/in-order"), await client.get("/jobs/in-order/result"),
                   await client.post("/jobs", json={"agent": "echo", "data": {}, "id": "in-order"})]
        async with sse_events(client, "/jobs/in-order/events") as events:
            streamed = json.loads((await anext(events))["data"])
        # Then each shows job_id first, then status, and links last, as documented (job_id came just before links)
        for fields in [*(list(a.json()) for a in answers), list(streamed)]:
            assert fields[:2] == ["job_id", "status"] and fields[-1] == "links", fields
