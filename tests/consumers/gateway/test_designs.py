"""The two designs' requests as written, against a real gateway and a real worker (contract §13)."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime
from typing import Any

import redis as sync_redis

from consumers.processes import streamcrew_cmd
from streams.keys import Keys
from streams.records import get_job
from tests.consumers.gateway.support import GatewayFactory
from tests.support import WorkerFactory, wait_results, wait_until

# The first design's three requests, verbatim: (agent, payload, lane its priority names, facts the answer quotes)
DESIGN: list[tuple[str, dict[str, Any], str, tuple[str, ...]]] = [
    ("order_processing", {"customer_id": "CUST-001", "request_type": "order", "data": {"order_id": "ORD-12345", "priority": 5}},
     "normal", ("FedEx", "771234567890")),
    ("returns_processing", {"customer_id": "CUST-002", "request_type": "return", "data": {"order_id": "ORD-67890", "reason": "Defective", "priority": 8}},
     "high", ('"approved":true', "RMA-")),
    ("product_info", {"customer_id": "CUST-003", "request_type": "product", "data": {"sku": "SKU-001", "query": "specifications", "priority": 3}},
     "low", ('"stock":150', "Specifications:")),
]


async def test_the_first_designs_payloads_complete_via_xadd_gateway_and_python_api(
    gateways: GatewayFactory, workers: WorkerFactory, redis, keys: Keys, producer,  # type: ignore[no-untyped-def]
) -> None:
    gateway = await gateways.start()
    # Given each of the three requests sent three ways, before any worker runs:
    # a raw XADD to the normal lane, the gateway and the Python API (both without a priority)
    expected_lane: dict[str, str] = {}
    async with gateway.client() as client:
        for n, (agent, payload, lane, _) in enumerate(DESIGN):
            await redis.xadd(keys.lane("normal"), {"agent": agent, "data": json.dumps(payload), "id": f"xadd-{n}"})
            expected_lane[f"xadd-{n}"] = "normal"  # a raw XADD stays in the lane it was added to
            posted = await client.post("/jobs", json={"agent": agent, "data": payload, "id": f"http-{n}"})
            assert posted.status_code == 202, posted.text
            assert posted.json()["lane"] == lane
            expected_lane[f"http-{n}"] = lane
            published = await producer.publish(agent, payload, id=f"api-{n}")
            assert published.lane == lane
            expected_lane[f"api-{n}"] = lane
        # And an explicit priority wins over the one in the payload
        explicit = await client.post("/jobs", json={"agent": DESIGN[1][0], "data": DESIGN[1][1], "priority": "low", "id": "explicit"})
        assert explicit.json()["lane"] == "low"
        expected_lane["explicit"] = "low"

    # When a worker serves them (the offline model: CrewAI crews over the demo catalogue)
    workers.start("--concurrency", "20", wait_ready=False, all_agents=True)  # CrewAI's import is slow on a loaded machine: wait for results
    events = {r.id: r for r in await wait_results(redis, keys, len(expected_lane), timeout=120)}

    # Then every one completed with an answer about the catalogue's real records, and ran from its lane
    assert sorted(events) == sorted(expected_lane)
    for n, (agent, payload, _, facts) in enumerate(DESIGN):
        for way in ("xadd", "http", "api"):
            event = events[f"{way}-{n}"]
            assert event.status == "completed", (event.id, event.error)
            assert event.agent == agent and event.result["customer_id"] == payload["customer_id"]
            for fact in facts:
                assert fact in event.result["answer"], (event.id, fact, event.result["answer"])
    for job_id, lane in expected_lane.items():
        record = await get_job(redis, keys, job_id)
        assert record is not None and record.lane == lane, (job_id, record)


def _iso_ms(value: str) -> int:
    return int(datetime.fromisoformat(value).timestamp() * 1000)


async def test_the_second_designs_curl_lines_verbatim(gateways: GatewayFactory, workers: WorkerFactory) -> None:
    gateway = await gateways.start()
    async with gateway.client() as client:
        # curl -X POST http://localhost:8001/tasks -H "Content-Type: application/json" \
        #   -d '{"query": "Explain async programming", "user_id": "user-001", "priority": "normal"}'
        body = b'{"query": "Explain async programming", "user_id": "user-001", "priority": "normal"}'
        posted = await client.post("/tasks", content=body, headers={"Content-Type": "application/json"})
        # → {"job_id": "abc-123", "status": "queued", ...}
        assert posted.status_code == 202, posted.text
        accepted = posted.json()
        assert accepted["status"] == "queued" and accepted["lane"] == "normal"
        job_id = accepted["job_id"]

        # curl http://localhost:8001/jobs/abc-123/status, before any worker: queued, the later times null
        status = (await client.get(f"/jobs/{job_id}/status")).json()
        assert status["status"] == "queued" and status["started_at"] is None and status["completed_at"] is None
        queued_at = _iso_ms(status["queued_at"])

        # When a worker runs it
        worker = workers.start("--agents", "ask", wait_ready=False)

        async def done() -> bool:
            assert worker.alive(), worker.log_text()[-3000:]
            return (await client.get(f"/jobs/{job_id}/status")).json()["status"] == "completed"

        await wait_until(done, timeout=90, what="the task to complete")
        status = (await client.get(f"/jobs/{job_id}/status")).json()
        assert set(status) == {"job_id", "status", "queued_at", "started_at", "completed_at"}
        assert queued_at <= _iso_ms(status["started_at"]) <= _iso_ms(status["completed_at"])
        assert status["queued_at"].endswith("+00:00")

        # curl http://localhost:8001/jobs/abc-123/result → {"result": {"answer": "..."}}
        result = (await client.get(f"/jobs/{job_id}/result")).json()
        assert result["agent"] == "ask" and result["status"] == "completed" and result["tenant"] == "user-001"
        assert "Explain async programming" in result["result"]["answer"]

        # curl http://localhost:8001/queue/stats
        stats = await client.get("/queue/stats")
        assert stats.status_code == 200
        assert stats.json()["completed"] == 1 and stats.json()["by_tenant"]["user-001"]["results"] == 1

        # And bad tasks get the API's clear 422
        for bad in ({"user_id": "u"}, {"query": "", "priority": "normal"}, {"query": "q", "priority": "urgent"}, {"query": "q", "model": "x"}):
            answer = await client.post("/tasks", json=bad)
            assert answer.status_code == 422 and answer.json()["error"]["code"], (bad, answer.text)
        assert (await client.get("/jobs/no-such-job/status")).status_code == 404


async def test_tasks_and_status_keep_tenants_apart(gateways: GatewayFactory, redis, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    gateway = await gateways.start({"STREAMCREW_API_KEYS": "k-operator,k-acme:acme,k-globex:globex"})
    async with gateway.client("k-acme") as acme, gateway.client("k-globex") as globex:
        # A tenant-bound key's task is its tenant's; user_id is checked as tenant is in POST /jobs
        posted = await acme.post("/tasks", json={"query": "hello"})
        assert posted.status_code == 202
        job_id = posted.json()["job_id"]
        raw = await redis.hgetall(keys.job(job_id))
        assert raw["tenant"] == "acme"
        assert (await acme.post("/tasks", json={"query": "hello", "user_id": "globex"})).status_code == 403
        # And another tenant cannot see its status
        assert (await acme.get(f"/jobs/{job_id}/status")).status_code == 200
        assert (await globex.get(f"/jobs/{job_id}/status")).status_code == 404


def test_submit_picks_the_lane_from_the_payload_unless_told(redis_url: str, prefix: str) -> None:
    payload = json.dumps(DESIGN[1][1])  # the return request, priority 8 inside data.data

    def submit(*extra: str) -> dict[str, Any]:
        done = subprocess.run(streamcrew_cmd("submit", "returns_processing", "--data", payload, *extra, "--redis-url", redis_url, "--prefix", prefix),
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return dict(json.loads(done.stdout))

    keys = Keys(prefix)
    by_data, explicit = submit("--id", "cli-data"), submit("--id", "cli-explicit", "--priority", "low")
    client = sync_redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        lanes = {job: client.hget(keys.job(job), "lane") for job in (by_data["job_id"], explicit["job_id"])}
    finally:
        client.close()
    assert lanes == {"cli-data": "high", "cli-explicit": "low"}


async def test_a_task_that_finds_no_free_id_is_409_as_its_document_says(gateways: GatewayFactory, redis, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    # Given records squatting the next entry ID of the clock and its '<lane>:' form, the names an id-less job could take
    # (only a raw XADD and HSET can do it)
    ahead = 9_999_999_999_000
    await redis.set(keys.clock, f"{ahead}-0")
    for job_id in (f"{ahead}-1", f"normal:{ahead}-1"):
        await redis.hset(keys.job(job_id), mapping={"status": "queued"})
    gateway = await gateways.start()
    async with gateway.client() as client:
        # When a task is submitted
        answer = await client.post("/tasks", json={"query": "Explain async programming"})
        # Then it is 409 id_conflict, nothing queued
        assert answer.status_code == 409 and answer.json()["error"]["code"] == "id_conflict", answer.text
        # And the OpenAPI document lists that answer for POST /tasks, of the shared error shape (it did not)
        responses = (await client.get("/openapi.json")).json()["paths"]["/tasks"]["post"]["responses"]
        assert responses["409"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ErrorResponse"}, responses
