"""Dead letters in bulk and webhook dead letters over HTTP, operators only; deadline and timeout_s on POST /jobs (issue 11 §5)."""

from __future__ import annotations

import asyncio
import json

import pytest

from streams.keys import Keys
from tests.consumers.gateway.support import GatewayFactory
from tests.severed import severed_after
from tests.support import WorkerFactory, wait_until

KEYS = {"STREAMCREW_API_KEYS": "k-operator,k-acme:acme"}


async def _dead(redis, keys: Keys, reasons: list[str]) -> None:  # type: ignore[no-untyped-def]
    for i, reason in enumerate(reasons):
        await redis.xadd(keys.dead, {"id": f"d{i}", "agent": "echo", "reason": reason, "error": "e", "source_stream": keys.lane("low"),
                                     "source_id": f"{i + 1}-0", "attempts": "1", "dead_at": "1",
                                     "request": json.dumps({"agent": "echo", "data": "{}"})})


async def _webhook_dead(redis, keys: Keys, n: int) -> list[str]:  # type: ignore[no-untyped-def]
    return [await redis.xadd(keys.webhooks_dead, {"id": f"job-{i}", "url": "https://example.com/hook", "attempts": "8", "last_status": "503",
                                                  "error": "503 Service Unavailable", "dead_at": "1", "event": json.dumps({"id": f"job-{i}"})})
            for i in range(n)]


async def test_dead_letters_purged_and_replayed_by_reason(gateways: GatewayFactory, redis, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    await _dead(redis, keys, ["invalid", "expired", "invalid", "exhausted", "expired"])
    gateway = await gateways.start(KEYS)
    async with gateway.client("k-operator") as client:
        purged = await client.delete("/dead", params={"reason": "invalid"})
        assert (purged.status_code, purged.json()) == (200, {"purged": 2})
        replayed = await client.post("/dead/replay", params={"reason": "expired"})
        assert (replayed.status_code, replayed.json()) == (202, {"replayed": ["d1", "d4"], "skipped": []})
        assert [d["id"] for d in (await client.get("/dead")).json()["dead_letters"]] == ["d3"]
        assert (await client.post("/dead/replay")).json() == {"replayed": ["d3"], "skipped": []}
        assert await redis.xlen(keys.lane("low")) == 3
        await _dead(redis, keys, ["rejected", "exhausted"])
        assert (await client.delete("/dead")).json() == {"purged": 2}
        assert await redis.xlen(keys.dead) == 0
        bad = await client.delete("/dead", params={"reason": "bogus"})
        assert bad.status_code == 422


async def test_webhook_dead_letters_listed_and_replayed(gateways: GatewayFactory, redis, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    ids = await _webhook_dead(redis, keys, 3)
    gateway = await gateways.start(KEYS)
    async with gateway.client("k-operator") as client:
        first = (await client.get("/webhooks/dead", params={"count": 2})).json()
        rest = (await client.get("/webhooks/dead", params={"count": 2, "after": first["next_after"]})).json()
        letters = first["dead_letters"] + rest["dead_letters"]
        assert [d["entry_id"] for d in letters] == ids and rest["next_after"] is None
        assert (letters[0]["id"], letters[0]["last_status"], letters[0]["event"]) == ("job-0", 503, {"id": "job-0"})
        one = await client.post(f"/webhooks/dead/{ids[0]}/replay")
        assert (one.status_code, one.json()) == (202, {"replayed": [ids[0]], "skipped": []})
        gone = await client.post(f"/webhooks/dead/{ids[0]}/replay")
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "dead_letter_not_found"
        rest_replayed = await client.post("/webhooks/dead/replay")
        assert rest_replayed.json() == {"replayed": ids[1:], "skipped": []}
    assert await redis.xlen(keys.webhooks_dead) == 0
    assert await redis.xlen(keys.webhooks_due) == 3  # a running notifier delivers them


async def test_tenant_keys_cannot_touch_dead_letters(gateways: GatewayFactory, redis, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    await _dead(redis, keys, ["invalid"])
    ids = await _webhook_dead(redis, keys, 1)
    gateway = await gateways.start(KEYS)
    async with gateway.client("k-acme") as client:
        for method, path in [("DELETE", "/dead"), ("POST", "/dead/replay"), ("GET", "/webhooks/dead"),
                             ("POST", "/webhooks/dead/replay"), ("POST", f"/webhooks/dead/{ids[0]}/replay")]:
            answer = await client.request(method, path)
            assert answer.status_code == 403, (method, path, answer.text)
    async with gateway.client() as anonymous:
        assert (await anonymous.delete("/dead")).status_code == 401
    assert await redis.xlen(keys.dead) == 1 and await redis.xlen(keys.webhooks_dead) == 1


async def test_deadline_and_timeout_through_post_jobs(gateways: GatewayFactory, workers: WorkerFactory) -> None:
    gateway = await gateways.start()
    workers.start("--agents", "echo", "--concurrency", "10")
    async with gateway.client() as client:
        late = await client.post("/jobs", json={"agent": "echo", "data": {}, "id": "late", "deadline": 1})
        slow = await client.post("/jobs", json={"agent": "echo", "data": {"sleep_s": 5}, "id": "slow", "timeout_s": 0.2, "max_attempts": 1})
        assert late.status_code == slow.status_code == 202

        async def ended(job_id: str) -> dict | None:  # type: ignore[type-arg]
            r = await client.get(f"/jobs/{job_id}/result")
            return r.json() if r.status_code == 200 else None

        async def both() -> bool:
            return await ended("late") is not None and await ended("slow") is not None

        await wait_until(both, timeout=20, what="both jobs to end")
        assert (await ended("late"))["status"] == "expired"  # type: ignore[index]
        slow_result = await ended("slow")
        assert slow_result is not None and slow_result["status"] == "failed" and "timed out after 0.2s" in slow_result["error"]
        bad = await client.post("/jobs", json={"agent": "echo", "data": {}, "deadline": "tomorrow"})
        assert bad.status_code == 422


async def test_partition_names_without_partitions_are_not_found(gateways: GatewayFactory, redis, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    # Given one partition (names `<entry ID>:<p>` exist only with several) and dead letters of both kinds
    await _dead(redis, keys, ["invalid"])
    (webhook_id,) = await _webhook_dead(redis, keys, 1)
    gateway = await gateways.start(KEYS)
    async with gateway.client("k-operator") as client:
        # Then a partitioned name is an unknown letter, never a Redis error (found by schemathesis as a 500)
        for path in ("/dead/1-0:3/replay", f"/webhooks/dead/{webhook_id}:0/replay"):
            answer = await client.post(path)
            assert answer.status_code == 404 and answer.json()["error"]["code"] == "dead_letter_not_found", (path, answer.text)
        for path in ("/dead", "/webhooks/dead"):
            page = await client.get(path, params={"after": "0-1:2"})
            assert page.status_code == 200, (path, page.text)
            assert len(page.json()["dead_letters"]) == 1


@pytest.mark.parametrize("kind", ["dead", "webhooks-dead"])
async def test_a_replay_redis_cuts_off_part_way_answers_503_with_what_went_back(  # type: ignore[no-untyped-def]
        gateways: GatewayFactory, redis, redis_url: str, keys: Keys, kind: str) -> None:
    # Given three dead letters of one kind, and a gateway whose Redis is reached through a link that can go away
    if kind == "dead":
        await _dead(redis, keys, ["exhausted"] * 3)
        path, went_back, source, first = "/dead/replay", "d0", keys.dead, keys.lane("low")
    else:
        ids = await _webhook_dead(redis, keys, 3)
        path, went_back, source, first = "/webhooks/dead/replay", ids[0], keys.webhooks_dead, keys.webhooks_due
    async with severed_after(redis_url, scripts=1_000_000) as link:
        # (in a thread of its own: the start waits for the gateway without yielding, and the link runs on this loop)
        gateway = await asyncio.to_thread(asyncio.run, gateways.start(KEYS, redis_url=link.url))
        link.scripts = link.answered + 1  # it goes away once this request's first replay is answered
        async with gateway.client("k-operator") as client:
            answer = await client.post(path)
        assert link.cut.is_set(), answer.text
    # Then the answer is the usual 503, and it also says what went back before the outage (additive keys)
    assert (answer.status_code, answer.headers.get("retry-after")) == (503, "1"), answer.text
    body = answer.json()
    assert body["error"]["code"] == "redis_unavailable" and "part-way" in body["error"]["message"], body
    assert (body["replayed"], body["skipped"]) == ([went_back], []), body
    # And Redis agrees: one went back, two are still dead letters
    assert (await redis.xlen(first), await redis.xlen(source)) == (1, 2)


async def test_a_hand_written_dead_letter_is_listed_as_malformed_not_a_500(gateways: GatewayFactory, redis, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    # Given, among good ones, dead letters written by hand into both dead streams: no id, a time that is not one
    await _dead(redis, keys, ["expired"])
    odd = await redis.xadd(keys.dead, {"agent": "echo", "reason": "invalid", "dead_at": "soon"})
    await _webhook_dead(redis, keys, 1)
    odd_hook = await redis.xadd(keys.webhooks_dead, {"id": "job-x", "attempts": "many"})
    gateway = await gateways.start(KEYS)
    async with gateway.client("k-operator") as client:
        # When an operator lists them, every one is listed: the odd ones as malformed, saying what is wrong
        letters = {d["entry_id"]: d for d in (await client.get("/dead")).json()["dead_letters"]}
        assert len(letters) == 2 and letters[odd]["reason"] == "malformed" and "'id'" in letters[odd]["error"], letters
        hooks = {d["entry_id"]: d for d in (await client.get("/webhooks/dead")).json()["dead_letters"]}
        assert len(hooks) == 2 and hooks[odd_hook]["id"] == "job-x" and "attempts" in hooks[odd_hook]["error"], hooks
        # And the odd job dead letter is not replayed (it has no request to run), while the good one is
        replayed = await client.post("/dead/replay")
        assert replayed.status_code == 202 and replayed.json()["replayed"] == ["d0"], replayed.text
        assert len(replayed.json()["skipped"]) == 1 and "purge it" in replayed.json()["skipped"][0]


async def test_a_replay_by_bare_entry_id_answers_the_name_the_list_shows(gateways: GatewayFactory, redis, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    # Given four partitions and a dead letter in partition 3, listed as '<entry ID>:3'
    part = keys.in_partition(3)
    await redis.xadd(part.dead, {"id": "p3-job", "agent": "echo", "reason": "expired", "error": "e", "source_stream": part.lane("low"),
                                 "source_id": "1-0", "attempts": "1", "dead_at": "1", "request": json.dumps({"agent": "echo", "data": "{}"})},
                     id="1700000000001-0")
    gateway = await gateways.start({**KEYS, "STREAMCREW_PARTITIONS": "4"})
    async with gateway.client("k-operator") as client:
        (listed,) = (await client.get("/dead")).json()["dead_letters"]
        # When it is replayed by its bare entry ID
        replayed = await client.post("/dead/1700000000001-0/replay")
        # Then the answer names it as the list did
        assert replayed.status_code == 202 and replayed.json()["entry_id"] == listed["entry_id"] == "1700000000001-0:3", replayed.text
