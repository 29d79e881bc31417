"""A workflow's own ``usage`` (contract §9, docs/llm.md): its steps' usage summed by the fan-in Lua, with a job's rules.

``cost_usd`` is null when any step's cost is unknown (never a guess); ``offline: true`` when any step's usage has
it (one offline call marks a job); ``model`` lists the distinct models of all steps. Real Redis, real worker
processes: the ``ask`` agent on the offline model and against ``mock-llm`` with an unpriced model, and a probe agent
(``tests/workflows/usage_app.py``) that records chosen calls through the worker's ledger.
"""

from __future__ import annotations

from typing import Any

import pytest

from consumers.mock_llm import running_mock_llm
from streams.dead import list_dead, replay
from streams.keys import Keys
from streams.producer import Producer
from streams.workflow import Workflow
from tests.support import WorkerFactory, wait_for_log
from tests.workflows.support import READY_TIMEOUT_S, events_of, start_workers, wait_event

APP = "tests.workflows.usage_app"
UNPRICED = "no-such-priced-model-x1"  # not in the seed price table: its calls cost null


def call(model: str, prompt: int, completion: int, cost: float | None, *, offline: bool = False) -> dict[str, Any]:
    return {"model": model, "prompt": prompt, "completion": completion, "cost": cost, "offline": offline}


async def step_usages(redis: Any, keys: Keys, wf_id: str, sids: list[str]) -> dict[str, Any]:
    out = {}
    for sid in sids:
        (event,) = await events_of(redis, keys, f"{wf_id}::{sid}")
        assert event.status == "completed", event
        out[sid] = event.usage
    return out


async def test_offline_ask_steps_make_an_offline_total(redis, keys: Keys, producer: Producer, workers: WorkerFactory) -> None:
    # Given a worker on the offline model (no base URL) and a workflow of two dependent ask steps
    start_workers(workers, 1, "--concurrency", "2")
    wf = Workflow("wf-offline")
    wf.step("q1", "ask", {"prompt": "what is a stream?"})
    wf.step("q2", "ask", {"prompt": "and a consumer group?"}, after=["q1"])
    await producer.publish_workflow(wf)
    # When it runs
    event = await wait_event(redis, keys, "wf-offline", timeout=60)
    # Then each step's usage is marked offline, and so is the workflow's total, which costs 0
    assert event.status == "completed", event.error
    steps = await step_usages(redis, keys, "wf-offline", ["q1", "q2"])
    assert all(u and u["offline"] is True and u["model"] == "offline-mock" for u in steps.values()), steps
    assert event.usage is not None
    assert event.usage["offline"] is True, event.usage
    assert event.usage["model"] == "offline-mock"
    assert event.usage["cost_usd"] == 0
    assert event.usage["prompt_tokens"] == sum(u["prompt_tokens"] for u in steps.values())
    assert event.usage["completion_tokens"] == sum(u["completion_tokens"] for u in steps.values())


async def test_unpriced_model_makes_the_total_cost_null(redis, keys: Keys, producer: Producer, workers: WorkerFactory) -> None:
    # Given mock-llm and a worker calling it with a model that has no price, and a workflow of two ask steps
    async with running_mock_llm() as mock:
        worker = workers.start("--concurrency", "2", "--llm-base-url", mock.openai_base_url, wait_ready=False,
                               env={"STREAMCREW_LLM_API_KEYS": "sk-test-unpriced", "STREAMCREW_LLM_MODEL": UNPRICED})
        wait_for_log(worker, " ready: ", timeout=READY_TIMEOUT_S)
        wf = Workflow("wf-unpriced")
        wf.step("q1", "ask", {"prompt": "what is a stream?"})
        wf.step("q2", "ask", {"prompt": "and a consumer group?"})
        await producer.publish_workflow(wf)
        # When it runs
        event = await wait_event(redis, keys, "wf-unpriced", timeout=60)
    # Then each step's cost is unknown (null), and so is the workflow's: never 0, which would be a guess
    assert event.status == "completed", event.error
    steps = await step_usages(redis, keys, "wf-unpriced", ["q1", "q2"])
    assert all(u and u["cost_usd"] is None and u["model"] == UNPRICED and "offline" not in u for u in steps.values()), steps
    assert event.usage is not None
    assert "cost_usd" in event.usage and event.usage["cost_usd"] is None, event.usage
    assert "offline" not in event.usage
    assert event.usage["model"] == UNPRICED
    assert event.usage["prompt_tokens"] == sum(u["prompt_tokens"] for u in steps.values()) > 0


async def test_mixed_steps_total_is_null_cost_offline_and_lists_each_model_once(
    redis, keys: Keys, producer: Producer, workers: WorkerFactory,
) -> None:
    # Given a worker serving the probe agent, and two workflows of steps with chosen usage:
    start_workers(workers, 1, "--concurrency", "4", "--app", APP)
    mixed = Workflow("wf-mixed")  # priced, unpriced, offline, two models in one step, and a step with no usage
    mixed.step("priced", "usage_probe", {"calls": [call("model-a", 100, 10, 0.00012345)]})
    mixed.step("unpriced", "usage_probe", {"calls": [call("model-b", 200, 20, None)]}, after=["priced"])
    mixed.step("offline", "usage_probe", {"calls": [call("offline-mock", 300, 30, 0.0, offline=True)]})
    mixed.step("two", "usage_probe", {"calls": [call("model-c", 1, 2, 0.001), call("model-a", 3, 4, 0.002)]})
    mixed.step("none", "echo", {"n": 1})
    priced = Workflow("wf-priced")  # every step priced and online
    priced.step("p1", "usage_probe", {"calls": [call("model-a", 10, 1, 0.1)]})
    priced.step("p2", "usage_probe", {"calls": [call("model-a", 20, 2, 0.2), call("model-b", 5, 5, 0.00000001)]})
    priced.step("none", "echo", {"n": 2})
    await producer.publish_workflow(mixed)
    await producer.publish_workflow(priced)
    # When both run
    got = await wait_event(redis, keys, "wf-mixed", timeout=60)
    ok = await wait_event(redis, keys, "wf-priced", timeout=60)
    # Then the steps' usage is what the probe recorded (through the worker's ledger)
    assert got.status == "completed" and ok.status == "completed", (got.error, ok.error)
    steps = await step_usages(redis, keys, "wf-mixed", ["priced", "unpriced", "offline", "two", "none"])
    assert steps["unpriced"]["cost_usd"] is None and steps["offline"]["offline"] is True and steps["none"] is None
    assert steps["two"]["model"] == "model-c,model-a"
    # and the mixed total: one unknown cost makes it null; one offline step marks it offline; each model once
    assert got.usage == {"model": "model-a,model-b,model-c,offline-mock", "prompt_tokens": 604, "completion_tokens": 66,
                         "cost_usd": None, "offline": True}, got.usage
    # and an all-priced, all-online total is the sum, rounded like a job's, without 'offline'
    assert ok.usage is not None and "offline" not in ok.usage, ok.usage
    assert ok.usage["model"] == "model-a,model-b"
    assert (ok.usage["prompt_tokens"], ok.usage["completion_tokens"]) == (35, 8)
    assert ok.usage["cost_usd"] == pytest.approx(0.30000001, abs=1e-12)


async def test_a_replayed_workflows_event_counts_only_the_steps_run_again(
    redis, keys: Keys, producer: Producer, workers: WorkerFactory,
) -> None:
    # Given a workflow of a step that spends 100 prompt tokens and one that spends 5 and fails its one attempt
    start_workers(workers, 1, "--concurrency", "4", "--app", APP)
    wf = Workflow("wf-replay-usage")
    wf.step("kept", "usage_probe", {"calls": [call("model-a", 100, 10, 0.1)]})
    wf.step("flaky", "usage_probe", {"calls": [call("model-a", 5, 1, 0.01)], "fail_first": 1}, max_attempts=1)
    await producer.publish_workflow(wf)
    failed = await wait_event(redis, keys, "wf-replay-usage", timeout=60)
    assert failed.status == "failed" and failed.usage is not None, failed
    assert failed.usage["prompt_tokens"] == 105, failed.usage  # both steps' calls, the failed attempt's included
    # When its dead letter is replayed and the failed step completes
    (letter,) = [d for d in await list_dead(redis, keys) if d.id == "wf-replay-usage"]
    assert letter.entry_id is not None
    await replay(redis, keys, letter.entry_id)
    done = await wait_event(redis, keys, "wf-replay-usage", n=2, timeout=60)
    # Then the new event counts the step that ran again, not the kept step already counted in the first
    # (the second event said 105 before: the 100 of the first again)
    assert done.status == "completed", done.error
    assert done.usage is not None and (done.usage["prompt_tokens"], done.usage["completion_tokens"]) == (5, 1), done.usage
    assert done.usage["cost_usd"] == pytest.approx(0.01, abs=1e-12)
    events = await events_of(redis, keys, "wf-replay-usage")
    assert sum(e.usage["prompt_tokens"] for e in events if e.usage) == 110  # each attempt's calls once: 100 + 5 + 5


async def test_a_step_that_failed_after_its_workflow_ended_is_counted_by_the_replays_event(
    redis, keys: Keys, producer: Producer, workers: WorkerFactory,
) -> None:
    # Given a workflow whose step a fails at once (100 prompt tokens) while step b calls (7) and fails 1 s later,
    # after the workflow ended failed
    start_workers(workers, 1, "--concurrency", "4", "--app", APP, "--app", "tests.agents.attempt_app")
    wf = Workflow("wf-late-step")
    wf.step("a", "usage_probe", {"calls": [call("m", 100, 1, 0.1)], "fail_first": 1}, max_attempts=1)
    wf.step("b", "slow_call", {"prompt": 7, "sleep_s": 1, "fail_first": 1}, max_attempts=1)
    await producer.publish_workflow(wf)
    assert (await wait_event(redis, keys, "wf-late-step", timeout=60)).status == "failed"
    assert (await wait_event(redis, keys, "wf-late-step::b", timeout=60)).status == "failed"
    # When the workflow is replayed and both steps complete
    (letter,) = [d for d in await list_dead(redis, keys) if d.id == "wf-late-step"]
    await replay(redis, keys, letter.entry_id)
    assert (await wait_event(redis, keys, "wf-late-step", n=2, timeout=60)).status == "completed"
    # Then the workflow's events together count every step attempt's calls once, b's late failure included
    steps = [*await events_of(redis, keys, "wf-late-step::a"), *await events_of(redis, keys, "wf-late-step::b")]
    paid = sum(e.usage["prompt_tokens"] for e in steps if e.usage)
    billed = sum(e.usage["prompt_tokens"] for e in await events_of(redis, keys, "wf-late-step") if e.usage)
    assert billed == paid == 214, (billed, paid)  # 100 + 7 + 100 + 7 (billed 207 before: b's first 7 lost)


async def test_a_step_handed_back_then_skipped_in_its_lane_is_counted_by_the_workflows_event(
    redis, keys: Keys, producer: Producer, workers: WorkerFactory,
) -> None:
    # Given one worker with two slots running steps 'boom' (asleep, then failing its one attempt) and 'slow' (one call of
    # 7 prompt tokens, then asleep)
    first = workers.start("--concurrency", "2", "--grace", "0.5", "--app", APP, "--app", "tests.agents.attempt_app")
    wf = Workflow("wf-handed-back")
    wf.step("boom", "echo", {"sleep_s": 3, "fail_first": 1}, max_attempts=1)
    wf.step("slow", "slow_call", {"prompt": 7, "sleep_s": 30})
    await producer.publish_workflow(wf)
    wait_for_log(first, "slow_call: attempt 1 called its model", timeout=READY_TIMEOUT_S)
    # When that worker stops (its drain hands both back, in the order they started: 'boom', then 'slow') and the next
    # one, of one slot, runs 'boom', whose failure ends the workflow and skips 'slow' where it waits
    first.terminate()
    assert first.wait(30) is not None, "the first worker did not stop"
    workers.start("--concurrency", "1", "--app", APP, "--app", "tests.agents.attempt_app")
    event = await wait_event(redis, keys, "wf-handed-back", timeout=60)
    assert event.status == "failed" and event.result["steps"]["slow"]["status"] == "skipped", event
    # Then the workflow's event counts the call the interrupted attempt paid (before: in no event at all)
    assert event.usage is not None and event.usage["prompt_tokens"] == 7, event.usage
