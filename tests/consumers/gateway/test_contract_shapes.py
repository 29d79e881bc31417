"""Every output of every kind of outcome, field by field, against the contract's tables (§3, §4, §6, §7;
docs/contract.md lists the deliberate differences): the result event on the stream, GET /jobs/{id}/result,
the webhook body and headers, GET /jobs/{id}, the record's hash and GET /dead. One real worker, gateway,
notifier and loopback receiver produce them all in one run."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis
from standardwebhooks import Webhook

from consumers.processes import streamcrew_cmd
from streams.keys import Keys
from streams.records import INTERNAL_FIELDS
from tests.consumers.gateway.support import GatewayFactory
from tests.consumers.notifier.conftest import NotifierFactory, make_secret
from tests.consumers.notifier.receiver import Receiver, Reply
from tests.support import WorkerFactory, wait_until

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TWO_STEPS = {"steps": [{"id": "a", "agent": "echo", "data": {"n": 1}}, {"id": "b", "agent": "echo", "data": {"n": 2}, "after": ["a"]}]}
FAILING_STEP = {"steps": [{"id": "a", "agent": "echo", "data": {"fail_first": 9}}, {"id": "b", "agent": "echo", "data": {}, "after": ["a"]}]}

UNPRICED_CALL = {"model": "no-price-model", "prompt": 7, "completion": 3, "cost": None}
APP = "tests.workflows.usage_app"  # usage_probe: an agent that records LLM calls and returns what it is told

# job id -> (how it is submitted: a POST /jobs body, or raw fields XADDed to the normal lane; its status; dead reason)
CASES: dict[str, tuple[dict[str, Any], str, str | None]] = {
    "c-ok": ({"agent": "echo", "data": {"n": 1}, "tenant": "acme"}, "completed", None),
    "c-failed": ({"agent": "echo", "data": {"fail_first": 9}, "max_attempts": 2}, "failed", "exhausted"),
    "c-unknown": ({"agent": "no-such-agent", "data": {}}, "rejected", "invalid"),
    "c-invalid": ({"agent": "echo", "data": {"sleep_s": -1}}, "rejected", "rejected"),
    "c-raw": ({"raw": {"agent": "echo", "data": "[1]"}}, "rejected", "invalid"),
    "c-expired": ({"agent": "echo", "data": {}, "deadline": 1}, "expired", "expired"),
    "wf-ok": ({"agent": "workflow", "data": TWO_STEPS}, "completed", None),
    "wf-failed": ({"agent": "workflow", "data": FAILING_STEP}, "failed", "step_failed"),
    "c-replayed": ({"agent": "echo", "data": {"fail_first": 2}, "max_attempts": 2}, "completed", None),  # after its replay
    "c-null": ({"agent": "usage_probe", "data": {"calls": [UNPRICED_CALL], "returns": None}}, "completed", None),
}
STARTED = {"c-ok", "c-failed", "c-invalid", "wf-ok", "wf-failed", "c-replayed", "c-null"}  # the rest never started

RESULT_FIELDS = {"id", "agent", "status", "result", "error", "attempts", "submitted_at", "started_at", "finished_at", "worker",
                 "usage", "webhook", "tenant", "traceparent", "parent", "step"}
RECORD_FIELDS = RESULT_FIELDS - {"id"} | {"lane", "attempt_started_at", "steps_total", "steps_done"}
VIEW_FIELDS = RECORD_FIELDS | {"job_id", "links", "steps"}
DEAD_FIELDS = {"entry_id", "id", "agent", "reason", "error", "source_stream", "source_id", "last_source_id", "attempts", "dead_at", "request"}
MS_FIELDS = ("submitted_at", "started_at", "attempt_started_at", "finished_at", "dead_at")


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver().start()
    yield r
    r.stop()


@pytest.fixture
def notifiers(redis_url: str, prefix: str, tmp_path: Path) -> Iterator[NotifierFactory]:
    factory = NotifierFactory(redis_url, prefix, tmp_path, make_secret())
    yield factory
    factory.close()


def _epoch_ms(value: Any, where: str, since_ms: int) -> None:
    """An epoch-ms int of this run (a value in seconds, µs or a string would fail)."""
    assert isinstance(value, int) and not isinstance(value, bool), f"{where}: {value!r} is not an integer"
    assert since_ms - 60_000 <= value <= time.time() * 1000 + 60_000, f"{where}: {value} is not epoch ms of this run"


def _stream_event(fields: dict[str, str]) -> dict[str, Any]:
    """A results-stream entry as JSON, as the contract says HTTP and webhooks carry it: numbers as numbers,
    ``result`` and ``usage`` parsed."""
    out: dict[str, Any] = dict(fields)
    for name in ("attempts", "submitted_at", "started_at", "finished_at"):
        if name in out:
            assert out[name].isdigit(), f"result field {name}={out[name]!r} is no integer"
            out[name] = int(out[name])
    for name in ("result", "usage"):
        if name in out:
            out[name] = orjson.loads(out[name])
    return out


def _check_event(job_id: str, event: dict[str, Any], since_ms: int, webhook: str) -> None:
    status, want_status = event["status"], CASES[job_id][1]
    assert status == want_status, f"{job_id}: status {status!r}, expected {want_status!r} ({event.get('error')})"
    assert set(event) <= RESULT_FIELDS, f"{job_id}: fields beyond the contract's: {set(event) - RESULT_FIELDS}"
    missing = {"id", "agent", "status", "attempts", "submitted_at", "finished_at", "worker"} - set(event)
    assert not missing, f"{job_id}: result event lacks {missing}"
    assert event["id"] == job_id
    assert ("result" in event) == (status == "completed" or event["agent"] == "workflow"), f"{job_id}: result present: {event}"
    assert ("error" in event) == (status != "completed"), f"{job_id}: error present: {event}"
    assert ("started_at" in event) == (job_id in STARTED), f"{job_id}: started_at present: {event}"
    assert isinstance(event["attempts"], int) and event["attempts"] >= 0
    for name in MS_FIELDS:
        if name in event:
            _epoch_ms(event[name], f"{job_id}.{name}", since_ms)
    assert event["submitted_at"] <= event.get("started_at", event["finished_at"]) <= event["finished_at"]
    assert event.get("webhook") == webhook, f"{job_id}: webhook {event.get('webhook')!r}"
    if job_id == "c-ok":
        assert (event["tenant"], event["traceparent"], event["result"]) == ("acme", TRACEPARENT, {"echo": {"n": 1}})
    if job_id == "c-null":  # an agent's output of null is still a result; an unpriced model's cost is null
        assert event["result"] is None and event["usage"] == {"model": "no-price-model", "prompt_tokens": 7, "completion_tokens": 3,
                                                              "cost_usd": None}, event
    if job_id == "c-replayed":
        assert event["attempts"] == 3, f"attempts count on across a replay: {event}"
    if event["agent"] == "workflow":
        assert set(event["result"]) == {"steps", "summary"} and set(event["result"]["steps"]) == {"a", "b"}, event["result"]


async def test_every_output_of_every_outcome_has_the_contracts_fields(
    redis: Redis, keys: Keys, redis_url: str, prefix: str, gateways: GatewayFactory, workers: WorkerFactory, notifiers: NotifierFactory,
    receiver: Receiver,
) -> None:
    # Given a worker, a notifier (its first delivery of c-ok answered 500), a gateway and a webhook receiver
    since_ms = int(time.time() * 1000)
    gateway = await gateways.start({"STREAMCREW_ALLOW_PRIVATE": "true"})
    workers.start("--concurrency", "8", "--app", APP)
    notifiers.start("--backoff", "0.05", "--lease", "2")
    receiver.script("/h/c-ok", [Reply(500)])
    receiver.script("/h/c-expired", [Reply(410, body=b"unsubscribed")])  # dead-lettered at once
    hooks = {job_id: receiver.url(f"/h/{job_id}") for job_id in CASES}

    async with gateway.client() as client:
        # When each kind of outcome is produced: over HTTP, and one raw XADD
        for job_id, (how, _, _) in CASES.items():
            if "raw" in how:
                await redis.xadd(keys.lane("normal"), {**how["raw"], "id": job_id, "webhook": hooks[job_id]})
                continue
            posted = await client.post("/jobs", json={**how, "id": job_id, "webhook": hooks[job_id]}, headers={"traceparent": TRACEPARENT})
            assert posted.status_code == 202, posted.text
            assert set(posted.json()) == {"job_id", "status", "lane", "links"} and posted.json()["status"] == "queued", posted.text

        async def ended(job_id: str) -> bool:
            return (await client.get(f"/jobs/{job_id}/result")).status_code == 200

        for job_id in CASES:
            await wait_until(lambda j=job_id: ended(j), timeout=60, what=f"{job_id} to end")  # type: ignore[misc]
        # And the dead letter of c-replayed is replayed (its third attempt, the first of the new run, completes)
        letters = (await client.get("/dead")).json()["dead_letters"]
        (letter,) = [d for d in letters if d["id"] == "c-replayed"]
        replayed = await client.post(f"/dead/{letter['entry_id']}/replay")
        assert replayed.status_code == 202 and set(replayed.json()) == {"entry_id", "job_id", "status", "links"}, replayed.text
        await wait_until(lambda: _results_of(redis, keys, "c-replayed", 2), timeout=30, what="the replayed run's result")
        await wait_until(lambda: receiver.count("/h/c-replayed") == 2, timeout=30, what="the replayed run's webhook")

        stream = [_stream_event(f) for _, f in await redis.xrange(keys.results)]
        events = {e["id"]: e for e in stream if e["id"] in CASES}  # the latest of each (c-replayed: its replayed run)
        steps = [e for e in stream if e.get("parent")]
        # Then each job has one result event (two for the replayed one), whose fields are the contract's
        assert sorted(e["id"] for e in stream if e["id"] in CASES) == sorted([*CASES, "c-replayed"])
        for job_id, event in events.items():
            _check_event(job_id, event, since_ms, hooks[job_id])
        # And a step's event also carries parent and step, and no webhook (steps do not inherit it)
        assert {(s["parent"], s["step"]) for s in steps} >= {("wf-ok", "a"), ("wf-ok", "b"), ("wf-failed", "a")}
        assert all("webhook" not in s and s["id"] == f"{s['parent']}::{s['step']}" for s in steps), steps

        for job_id, event in events.items():
            # And GET /jobs/{id}/result is that result event as JSON
            got = (await client.get(f"/jobs/{job_id}/result")).json()
            assert got == event, f"{job_id}: GET /jobs/{{id}}/result differs from the result event:\n{got}\n{event}"
            # And GET /jobs/{id} shows the record: the event's fields, no internal ones, and job_id and links
            view = (await client.get(f"/jobs/{job_id}")).json()
            assert set(view) <= VIEW_FIELDS, f"{job_id}: GET /jobs/{{id}} has fields beyond the contract's: {set(view) - VIEW_FIELDS}"
            assert view["job_id"] == job_id and view["links"]["result"] == f"/jobs/{job_id}/result"
            for name, value in event.items():
                if name != "id":
                    assert view.get(name) == value, f"{job_id}: GET /jobs/{{id}} {name}={view.get(name)!r}, the result event's {value!r}"
            for name in MS_FIELDS:
                if name in view:
                    _epoch_ms(view[name], f"{job_id} view {name}", since_ms)
            # And the record's hash holds no contract field the view lacks
            raw = await redis.hgetall(keys.job(job_id))
            assert set(raw) - INTERNAL_FIELDS <= RECORD_FIELDS, f"{job_id}: record fields {set(raw) - RECORD_FIELDS}"
            assert {k for k in raw if k not in INTERNAL_FIELDS} <= set(view), f"{job_id}: the view drops {set(raw) - set(view)}"
        assert events["wf-ok"]["result"]["summary"] == "2 of 2 steps completed"
        wf_view = (await client.get("/jobs/wf-ok")).json()
        assert (wf_view["steps_total"], wf_view["steps_done"]) == (2, 2), wf_view

        # And every failed, rejected and expired job (and only those) has a dead letter of the contract's fields
        dead = {d["id"]: d for d in (await client.get("/dead")).json()["dead_letters"]}
        want_dead = {job_id: reason for job_id, (_, _, reason) in CASES.items() if reason and job_id != "c-replayed"}
        assert {j: d["reason"] for j, d in dead.items() if j in CASES} == want_dead
        for job_id, d in dead.items():
            if job_id not in CASES:
                continue
            assert set(d) <= DEAD_FIELDS and DEAD_FIELDS - {"last_source_id"} <= set(d), f"{job_id}: dead letter fields {set(d)}"
            assert d["error"] == events[job_id]["error"], f"{job_id}: dead letter error {d['error']!r}"
            assert d["attempts"] == events[job_id]["attempts"] and d["source_stream"] == keys.lane("normal"), d
            assert all(isinstance(v, str) for v in d["request"].values()), d["request"]
            _epoch_ms(d["dead_at"], f"{job_id} dead_at", since_ms)

        # And the second design's status view gives ISO 8601 UTC times of the same instants
        times = (await client.get("/jobs/c-ok/status")).json()
        assert set(times) == {"job_id", "status", "queued_at", "started_at", "completed_at"}, times
        for name, ms in (("queued_at", "submitted_at"), ("started_at", "started_at"), ("completed_at", "finished_at")):
            assert datetime.fromisoformat(times[name]) == datetime.fromtimestamp(events["c-ok"][ms] / 1000, UTC), (name, times)

    # And `streamcrew dead list --json` prints the same dead letters as GET /dead
    listed = subprocess.run(streamcrew_cmd("dead", "list", "--json"), capture_output=True, text=True, timeout=60,
                            env={**os.environ, "STREAMCREW_REDIS_URL": redis_url, "STREAMCREW_PREFIX": prefix})
    assert listed.returncode == 0, listed.stderr
    assert {d["id"]: d for d in map(orjson.loads, listed.stdout.splitlines())} == dead

    # And the refused delivery's webhook dead letter has the contract's fields, its event the body sent
    await wait_until(lambda: _webhook_dead(redis, keys), timeout=30, what="c-expired's webhook dead letter")
    async with gateway.client() as client:
        (wd,) = (await client.get("/webhooks/dead")).json()["dead_letters"]
    assert set(wd) == {"entry_id", "id", "url", "attempts", "last_status", "error", "dead_at", "event"}, wd
    assert (wd["id"], wd["url"], wd["attempts"], wd["last_status"]) == ("c-expired", hooks["c-expired"], 1, 410), wd
    _epoch_ms(wd["dead_at"], "webhook dead_at", since_ms)
    assert wd["event"] == events["c-expired"], wd["event"]

    # And each webhook delivery is signed (Standard Webhooks), its id the job id, its body the result event
    await wait_until(lambda: all(receiver.on(f"/h/{j}") for j in CASES), timeout=30, what="a delivery for every job")
    await wait_until(lambda: receiver.count("/h/c-ok") == 2, timeout=30, what="c-ok delivered again after its 500")
    hook = Webhook(notifiers.secret)
    for job_id in CASES:
        for got in receiver.on(f"/h/{job_id}"):
            assert got.headers["content-type"] == "application/json"
            assert got.headers["webhook-id"] == job_id, f"{job_id}: webhook-id {got.headers['webhook-id']!r}"
            assert got.headers["webhook-signature"].startswith("v1,")
            _epoch_ms(int(got.headers["webhook-timestamp"]) * 1000, f"{job_id} webhook-timestamp (seconds)", since_ms)
            body = hook.verify(got.body, got.headers)
            assert body == orjson.loads(got.body)
        delivered = orjson.loads(receiver.on(f"/h/{job_id}")[-1].body)
        assert delivered == events[job_id], f"{job_id}: webhook body differs from the result event:\n{delivered}\n{events[job_id]}"


async def _webhook_dead(redis: Redis, keys: Keys) -> bool:
    return int(await redis.xlen(keys.webhooks_dead)) == 1


async def _results_of(redis: Redis, keys: Keys, job_id: str, n: int) -> bool:
    return sum(1 for _, f in await redis.xrange(keys.results) if f.get("id") == job_id) >= n
