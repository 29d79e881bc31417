"""STREAMCREW_MAX_RESULT_BYTES: no result grows past it, so a small request cannot make a huge event.

A security review built a ~10 KB workflow whose echo steps carry their inputs forward: its fan-in event came to
57 MB, blocked Redis for 1.5 s and the gateway for minutes. A job's result over the limit now fails the job (not
retried, dead letter ``too_large``); a workflow's result repeats step results only up to the limit and names the
size of those it leaves out (their own jobs keep them). Real Redis, real worker processes.
"""

from __future__ import annotations

import json
import os

from streams.keys import Keys
from streams.producer import Producer
from streams.workflow import Workflow
from tests.support import WorkerFactory
from tests.workflows.support import events_of, start_workers, wait_event

LIMIT = 3000
BLOB = "x" * 1200  # one echo result ~1.2 KB: two fit in LIMIT, three do not


async def test_a_result_over_the_limit_fails_its_job_once(redis, keys: Keys, producer: Producer, workers: WorkerFactory) -> None:
    # Given a worker whose results may be 3,000 bytes at most
    workers.env["STREAMCREW_MAX_RESULT_BYTES"] = str(LIMIT)
    start_workers(workers, 1)
    # When one echo job's result would be ~4 KB and another's ~1 KB (multi-byte characters count as bytes)
    await producer.publish("echo", {"blob": "é" * 2000}, id="too-big", max_attempts=3)
    await producer.publish("echo", {"blob": BLOB[:900]}, id="fits")
    big = await wait_event(redis, keys, "too-big")
    small = await wait_event(redis, keys, "fits")
    # Then the large one failed on its first attempt, saying why, with a dead letter; the small one completed
    assert (big.status, big.attempts, big.result) == ("failed", 1, None), big
    assert "over the 3000-byte limit (STREAMCREW_MAX_RESULT_BYTES)" in (big.error or ""), big.error
    letters = [f for _, f in await redis.xrange(keys.dead) if f["id"] == "too-big"]
    assert [f["reason"] for f in letters] == ["too_large"], letters
    assert small.status == "completed" and small.result == {"echo": {"blob": BLOB[:900]}}


async def test_a_workflow_result_repeats_step_results_up_to_the_limit(redis, keys: Keys, producer: Producer, workers: WorkerFactory) -> None:
    # Given the same limit and a workflow of three independent steps whose results are ~1.2 KB each
    workers.env["STREAMCREW_MAX_RESULT_BYTES"] = str(LIMIT)
    start_workers(workers, 1)
    wf = Workflow("wf-wide")
    for sid in ("a", "b", "c"):
        wf.step(sid, "echo", {"blob": BLOB})
    await producer.publish_workflow(wf)
    # When it completes
    event = await wait_event(redis, keys, "wf-wide", timeout=60)
    assert event.status == "completed", event.error
    steps = event.result["steps"]
    # Then two steps' results are in it and the third is named by its size, not repeated
    omitted = {sid: s for sid, s in steps.items() if s["result"] is None}
    kept = {sid: s for sid, s in steps.items() if s["result"] is not None}
    assert len(kept) == 2 and len(omitted) == 1, steps
    ((sid, entry),) = omitted.items()
    assert entry["status"] == "completed" and entry["result_omitted"] > 1200, entry
    assert len(json.dumps(event.result)) < LIMIT + 500
    # And that step's own result event has it whole
    (own,) = await events_of(redis, keys, f"wf-wide::{sid}")
    assert own.status == "completed" and own.result == {"echo": {"blob": BLOB}, "inputs": {}}


async def test_a_step_whose_inputs_pass_the_limit_is_rejected_without_building_them(
    redis, keys: Keys, producer: Producer, workers: WorkerFactory,
) -> None:
    # Given the same limit and a step after three steps whose results (~1.2 KB each) pass it together
    workers.env["STREAMCREW_MAX_RESULT_BYTES"] = str(LIMIT)
    start_workers(workers, 1)
    wf = Workflow("wf-fan-in")
    for sid in ("a", "b", "c"):
        wf.step(sid, "echo", {"blob": BLOB})
    wf.step("d", "echo", {}, after=["a", "b", "c"])
    await producer.publish_workflow(wf)
    # When it runs
    event = await wait_event(redis, keys, "wf-fan-in", timeout=60)
    # Then the step is rejected, saying its inputs are too large together (its request never carried them)
    d = await wait_event(redis, keys, "wf-fan-in::d")
    assert d.status == "rejected", d
    assert "inputs (its dependencies' results) are" in (d.error or "") and "STREAMCREW_MAX_RESULT_BYTES" in (d.error or ""), d.error
    (letter,) = [f for _, f in await redis.xrange(keys.dead) if f["id"] == "wf-fan-in::d"]
    request = json.loads(letter["request"])
    assert "inputs" not in request and int(request["inputs_omitted"]) > LIMIT, request
    # And the workflow ends failed, naming the step
    assert event.status == "failed" and "d" in (event.error or ""), event


async def test_a_steps_inputs_may_pass_the_request_limit_up_to_the_result_limit(
    redis, keys: Keys, producer: Producer, workers: WorkerFactory,
) -> None:
    # Given requests of 1,600 bytes at most, results of 3,000, and a step after three steps whose results
    # (~0.5, ~0.5 and ~1.1 KB: c repeats a's and b's as its inputs) come to ~2.2 KB together
    workers.env.update({"STREAMCREW_MAX_REQUEST_BYTES": "1600", "STREAMCREW_MAX_RESULT_BYTES": str(LIMIT)})
    start_workers(workers, 1)
    wf = Workflow("wf-inputs")
    wf.step("a", "echo", {"blob": BLOB[:500]})
    wf.step("b", "echo", {"blob": BLOB[:500]})
    wf.step("c", "echo", {}, after=["a", "b"])
    wf.step("d", "echo", {}, after=["a", "b", "c"])
    await producer.publish_workflow(wf)
    # When it runs
    event = await wait_event(redis, keys, "wf-inputs", timeout=60)
    # Then d ran with all three results as its inputs (its request was over 1,600 bytes: rejected before)
    d = await wait_event(redis, keys, "wf-inputs::d")
    assert (d.status, event.status) == ("completed", "completed"), (d.error, event.error)
    assert set(d.result["inputs"]) == {"a", "b", "c"} and len(json.dumps(d.result["inputs"])) > 1600, d.result


LOUD = '''
from agents import agent


@agent("loud_failure", max_attempts=1)
async def run(data: dict) -> dict:
    raise ValueError("x" * 100_000)  # an exception that quotes a large input
'''


async def test_an_error_text_is_cut_to_a_bounded_size(redis, keys: Keys, producer: Producer, redis_url: str, prefix: str, tmp_path) -> None:
    # Given an agent whose exception message is 100,000 characters
    (tmp_path / "loud_app.py").write_text(LOUD)
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH", "")) if p)
    workers = WorkerFactory(redis_url, prefix, tmp_path)
    try:
        workers.start("--app", "loud_app", env={"PYTHONPATH": path})
        # When its job fails
        await producer.publish("loud_failure", {}, id="loud")
        event = await wait_event(redis, keys, "loud")
    finally:
        workers.close()
    # Then the result, the record and the dead letter keep its start and say how much was cut, not all of it
    assert event.status == "failed" and event.error is not None
    assert event.error.startswith("ValueError: xxx") and "characters cut" in event.error and len(event.error) < 5000, len(event.error)
    (letter,) = [f for _, f in await redis.xrange(keys.dead) if f["id"] == "loud"]
    assert len(letter["error"]) < 5000
    assert len(await redis.hget(keys.job("loud"), "error")) < 5000


async def test_a_wide_fan_out_copies_inputs_only_up_to_the_workflows_budget(
    redis, keys: Keys, producer: Producer, workers: WorkerFactory,
) -> None:
    # Given the same limit (the workflow's budget for inputs: 16 x 3,000 bytes) and 50 steps after one ~1.2 KB result
    workers.env["STREAMCREW_MAX_RESULT_BYTES"] = str(LIMIT)
    start_workers(workers, 1)
    wf = Workflow("wf-fan-out", on_failure="continue")
    wf.step("a", "echo", {"blob": BLOB})
    for n in range(50):
        wf.step(f"d{n}", "echo", {}, after=["a"])
    await producer.publish_workflow(wf)
    # When it ends
    event = await wait_event(redis, keys, "wf-fan-out", timeout=90)
    steps = event.result["steps"]
    completed = [sid for sid, s in steps.items() if sid != "a" and s["status"] == "completed"]
    rejected = {sid: s for sid, s in steps.items() if s["status"] == "rejected"}
    # Then the steps whose inputs fit the budget ran with them, and the others were rejected saying why
    size = int(await redis.hget(f"{keys.prefix}:wf:wf-fan-out", "inputs_bytes"))
    assert 16 * LIMIT - 1300 < size <= 16 * LIMIT, size  # used up to the last step that fitted
    assert 30 <= len(completed) < 50 and len(completed) + len(rejected) == 50, steps.keys()
    for sid in rejected:  # their own events say why (the workflow's result has no room left for every error)
        (own,) = await events_of(redis, keys, f"wf-fan-out::{sid}")
        assert "over 16 times STREAMCREW_MAX_RESULT_BYTES" in (own.error or ""), own.error
    assert event.status == "failed"


async def test_step_errors_share_the_workflows_room(redis, keys: Keys, producer: Producer, redis_url: str, prefix: str, tmp_path) -> None:
    # Given a limit of 3,000 bytes and a workflow of three steps that each fail with ~4 KB of error text
    (tmp_path / "loud_app.py").write_text(LOUD)
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH", "")) if p)
    workers = WorkerFactory(redis_url, prefix, tmp_path, env={"STREAMCREW_MAX_RESULT_BYTES": str(LIMIT)})
    try:
        workers.start("--app", "loud_app", env={"PYTHONPATH": path})
        wf = Workflow("wf-loud", on_failure="continue")
        for sid in ("a", "b", "c"):
            wf.step(sid, "loud_failure", {})
        await producer.publish_workflow(wf)
        event = await wait_event(redis, keys, "wf-loud", timeout=60)
    finally:
        workers.close()
    # Then no error fits the room: each is named by its size, and the event stays small
    steps = event.result["steps"]
    assert all(s["status"] == "failed" and s["error"] is None and s["error_omitted"] > LIMIT for s in steps.values()), steps
    assert len(json.dumps(event.result)) < LIMIT
