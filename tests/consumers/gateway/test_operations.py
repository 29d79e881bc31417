"""Queue stats, dead letters and their replay, and /metrics, over HTTP."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from consumers.ops import open_ops
from streams.config import StreamSettings
from streams.keys import Keys
from tests.consumers.gateway.support import GatewayFactory
from tests.support import WorkerFactory, wait_until


async def test_dead_letters_listed_and_replayed(gateways: GatewayFactory, workers: WorkerFactory) -> None:
    gateway = await gateways.start()
    workers.start("--concurrency", "50")
    async with gateway.client() as client:
        # Given a job that fails its only attempt and is dead-lettered
        posted = await client.post("/jobs", json={"agent": "echo", "data": {"fail_first": 1}, "id": "doomed", "max_attempts": 1})
        assert posted.status_code == 202

        async def result_status() -> str | None:
            r = await client.get("/jobs/doomed/result")
            return r.json()["status"] if r.status_code == 200 else None

        async def failed() -> bool:
            return await result_status() == "failed"

        await wait_until(failed, timeout=15, what="the job to fail")
        # When the dead letters are listed
        page = await client.get("/dead")
        assert page.status_code == 200
        letters = page.json()["dead_letters"]
        assert [d["id"] for d in letters] == ["doomed"] and page.json()["next_after"] is None
        entry = letters[0]["entry_id"]
        # And the dead letter is replayed
        replayed = await client.post(f"/dead/{entry}/replay")
        assert replayed.status_code == 202, replayed.text
        assert replayed.json()["job_id"] == "doomed"

        # Then its second run (attempt 2 > fail_first) completes, and the dead letter is gone
        async def completed() -> bool:
            return await result_status() == "completed"

        await wait_until(completed, timeout=15, what="the replayed job to complete")
        assert (await client.get("/dead")).json()["dead_letters"] == []
        again = await client.post(f"/dead/{entry}/replay")
        assert again.status_code == 404 and again.json()["error"]["code"] == "dead_letter_not_found"


async def test_dead_letters_page(gateways: GatewayFactory, redis, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    # Given five dead letters
    for i in range(5):
        await redis.xadd(keys.dead, {"id": f"d{i}", "agent": "echo", "reason": "failed", "error": "boom",
                                     "source_stream": keys.lane("low"), "source_id": f"{i + 1}-0", "attempts": "1",
                                     "dead_at": "1700000000000", "request": '{"agent": "echo", "data": "{}"}'})
    gateway = await gateways.start()
    async with gateway.client() as client:
        first = (await client.get("/dead", params={"count": 2})).json()
        second = (await client.get("/dead", params={"count": 2, "after": first["next_after"]})).json()
        third = (await client.get("/dead", params={"count": 2, "after": second["next_after"]})).json()
    assert [d["id"] for d in first["dead_letters"] + second["dead_letters"] + third["dead_letters"]] == [f"d{i}" for i in range(5)]
    assert third["next_after"] is None


async def test_queue_stats_are_the_cli_figures(gateways: GatewayFactory, settings: StreamSettings) -> None:
    gateway = await gateways.start()
    async with gateway.client() as client:
        for lane in ("high", "low", "low"):
            assert (await client.post("/jobs", json={"agent": "echo", "data": {}, "priority": lane})).status_code == 202
        figures = (await client.get("/queue/stats")).json()
    async with open_ops(settings) as ops:
        cli = await ops.stats()
    assert figures["lanes"]["high"]["length"] == 1 and figures["lanes"]["low"]["length"] == 2
    assert figures.keys() == cli.keys() and figures["lanes"].keys() == cli["lanes"].keys()
    for lane in ("high", "normal", "low"):
        for field in ("stream", "group", "length", "pending", "lag", "consumers"):
            assert figures["lanes"][lane][field] == cli["lanes"][lane][field], (lane, field)
    assert figures["dead_letters"] == cli["dead_letters"] == 0


async def test_metrics_count_requests_by_route_and_show_stream_gauges(gateways: GatewayFactory, keys: Keys) -> None:
    gateway = await gateways.start()
    async with gateway.client() as client:
        for _ in range(3):
            await client.post("/jobs", json={"agent": "echo", "data": {}})
        await client.get("/jobs/unknown-1")
        await client.get("/jobs/unknown-2")
        await client.get("/docs")
        await client.get("/no/such/path")
        text = (await client.get("/metrics")).text
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    assert samples[("streamcrew_http_requests_total", (("method", "POST"), ("route", "/jobs"), ("status", "202")))] == 3
    assert samples[("streamcrew_http_requests_total", (("method", "GET"), ("route", "/jobs/{job_id}"), ("status", "404")))] == 2
    # FastAPI's own pages (open without keys) are routes too, not '<unmatched>', which is for unknown paths only
    assert samples[("streamcrew_http_requests_total", (("method", "GET"), ("route", "/docs"), ("status", "200")))] == 1
    assert samples[("streamcrew_http_requests_total", (("method", "GET"), ("route", "<unmatched>"), ("status", "404")))] == 1
    assert ("streamcrew_http_requests_total", (("method", "GET"), ("route", "<unmatched>"), ("status", "200"))) not in samples
    assert samples[("streamcrew_http_request_duration_seconds_count", (("method", "POST"), ("route", "/jobs")))] == 3
    assert samples[("streamcrew_stream_length", (("partition", "0"), ("stream", "normal")))] == 3
    assert ("streamcrew_group_pending", (("group", "workers"), ("partition", "0"), ("stream", "normal"))) in samples


async def test_a_dead_letter_of_a_live_job_is_not_replayed(gateways: GatewayFactory, redis, keys: Keys, producer) -> None:  # type: ignore[no-untyped-def]
    # Given an old dead letter of job "reused", and a new job of that id queued since (its record had expired)
    entry = await redis.xadd(keys.dead, {"id": "reused", "agent": "echo", "reason": "exhausted", "error": "old boom",
                                         "source_stream": keys.lane("low"), "source_id": "1-0", "attempts": "3",
                                         "dead_at": "1700000000000", "request": '{"agent": "echo", "data": "{}"}'})
    await producer.publish("echo", {"new": True}, id="reused")
    before = await redis.hgetall(keys.job("reused"))
    gateway = await gateways.start()
    async with gateway.client() as client:
        # When it is replayed over HTTP
        replayed = await client.post(f"/dead/{entry}/replay")
        # Then it is refused with the reason, and the live job and the dead letter are as they were
        assert replayed.status_code == 409, replayed.text
        assert replayed.json()["error"]["code"] == "cannot_replay"
        assert "is queued again" in replayed.json()["error"]["message"]
    assert await redis.hgetall(keys.job("reused")) == before
    assert await redis.xlen(keys.dead) == 1
    assert await redis.xlen(keys.lane("normal")) == 1
