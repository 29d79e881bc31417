"""Workflows end to end (contract §9): real Redis, real worker processes."""

from __future__ import annotations

from unittest.mock import patch

import pytest

from streams.config import StreamSettings
from streams.dead import list_dead, replay, replay_all
from streams.envelope import JobRequest, now_ms
from streams.errors import StreamcrewError
from streams.keys import Keys
from streams.producer import Producer
from streams.records import get_job
from streams.workflow import Workflow
from streams.workflows import WorkflowStarter
from tests.support import WorkerFactory, wait_results, wait_until
from tests.workflows.support import event_counts, events_of, start_workers, wait_event, wait_running


def design_graph(wf_id: str, agent: str, data: dict) -> Workflow:  # type: ignore[type-arg]
    """The first design's product analysis: reviews, pricing, inventory -> sentiment -> recommendation."""
    wf = Workflow(wf_id)
    wf.step("reviews", agent, {**data, "task": "summarise the reviews"})
    wf.step("pricing", agent, {**data, "task": "is the price competitive?"})
    wf.step("inventory", agent, {**data, "task": "stock level"})
    wf.step("sentiment", agent, {**data, "task": "sentiment of the reviews"}, after=["reviews"])
    wf.step("recommend", agent, {**data, "task": "recommend"}, after=["pricing", "inventory", "sentiment"])
    return wf


async def test_design_graph_completes_and_dependents_see_their_inputs(redis, keys: Keys, producer: Producer, workers: WorkerFactory) -> None:
    # Given two workers and the design's graph of echo steps
    start_workers(workers, 2, "--concurrency", "4")
    published = await producer.publish_workflow(design_graph("wf-design", "echo", {"sku": "SKU-001"}), tenant="acme")
    assert published.created
    # When it runs
    event = await wait_event(redis, keys, "wf-design")
    # Then one completed workflow event aggregates every step's result
    assert event.status == "completed", event.error
    assert event.agent == "workflow"
    steps = event.result["steps"]
    assert set(steps) == {"reviews", "pricing", "inventory", "sentiment", "recommend"}
    assert all(s["status"] == "completed" for s in steps.values())
    assert event.result["summary"] == "5 of 5 steps completed"
    # and the dependents saw their dependencies' results as ctx.inputs
    assert steps["reviews"]["result"]["inputs"] == {}
    assert steps["sentiment"]["result"]["inputs"] == {"reviews": steps["reviews"]["result"]}
    assert steps["recommend"]["result"]["inputs"] == {s: steps[s]["result"] for s in ("pricing", "inventory", "sentiment")}
    # and each step yielded its own result event carrying parent and step
    for sid in steps:
        (step_event,) = await events_of(redis, keys, f"wf-design::{sid}")
        assert step_event.parent == "wf-design" and step_event.step == sid and step_event.status == "completed"
        assert step_event.tenant == "acme"
    # and the record lists the steps as done
    record = await get_job(redis, keys, "wf-design")
    assert record is not None and record.status == "completed"
    assert record.steps_total == 5 and record.steps_done == 5
    assert record.steps is not None and [s["status"] for s in record.steps] == ["completed"] * 5


async def test_ten_independent_sleeping_steps_run_in_parallel(redis, keys: Keys, producer: Producer, workers: WorkerFactory) -> None:
    # Given two workers with 8 slots each and 10 independent steps of 1 s
    start_workers(workers, 2, "--concurrency", "8")
    wf = Workflow("wf-par")
    for i in range(10):
        wf.step(f"s{i}", "echo", {"sleep_s": 1})
    await producer.publish_workflow(wf)
    # When it runs
    event = await wait_event(redis, keys, "wf-par", timeout=30)
    # Then it completes in about one step's time, not ten
    assert event.status == "completed"
    assert event.started_at is not None and event.finished_at is not None
    elapsed_s = (event.finished_at - event.started_at) / 1000
    assert elapsed_s < 5, f"10 parallel 1 s steps took {elapsed_s:.1f}s"


async def test_fail_stops_dependents_and_steps_not_started(redis, keys: Keys, producer: Producer, workers: WorkerFactory) -> None:
    # Given one worker with one slot, so 'boom' runs first and 'indep' waits in the lane
    start_workers(workers, 1, "--concurrency", "1")
    wf = Workflow("wf-fail")
    wf.step("boom", "echo", {"fail_first": 5}, max_attempts=1)
    wf.step("indep", "echo", {"n": 1})
    wf.step("dep", "echo", {"n": 2}, after=["boom"])
    await producer.publish_workflow(wf, tenant="acme")
    # When 'boom' fails
    event = await wait_event(redis, keys, "wf-fail")
    # Then the workflow fails at once; what had not started is skipped and yields no event
    assert event.status == "failed"
    assert "boom" in (event.error or "")
    steps = event.result["steps"]
    assert steps["boom"]["status"] == "failed"
    assert steps["indep"]["status"] == "skipped"
    assert steps["dep"]["status"] == "skipped"
    assert (await wait_event(redis, keys, "wf-fail::boom")).status == "failed"
    # the worker takes 'indep' from its lane and drops it: its record stays skipped, no event
    await producer.publish("echo", {}, id="after-fail")  # the lane's next entry: once it is done, 'indep' was seen
    await wait_event(redis, keys, "after-fail")
    counts = await event_counts(redis, keys)
    assert counts["wf-fail::indep"] == 0 and counts["wf-fail::dep"] == 0 and counts["wf-fail"] == 1
    indep = await get_job(redis, keys, "wf-fail::indep")
    assert indep is not None and indep.status == "skipped" and indep.tenant == "acme"  # its tenant known while it waited
    # and the failed workflow is dead-lettered
    assert any(d.id == "wf-fail" and d.reason == "step_failed" for d in await list_dead(redis, keys))


async def test_continue_runs_independents_and_skips_dependents(redis, keys: Keys, producer: Producer, workers: WorkerFactory) -> None:
    start_workers(workers, 1, "--concurrency", "4")
    wf = Workflow("wf-cont", on_failure="continue")
    wf.step("boom", "echo", {"fail_first": 5}, max_attempts=1)
    wf.step("dep", "echo", {}, after=["boom"])
    wf.step("deeper", "echo", {}, after=["dep"])
    wf.step("indep", "echo", {"sleep_s": 0.3})
    wf.step("next", "echo", {}, after=["indep"])
    await producer.publish_workflow(wf)
    event = await wait_event(redis, keys, "wf-cont")
    steps = event.result["steps"]
    assert event.status == "failed"
    assert {k: v["status"] for k, v in steps.items()} == {
        "boom": "failed", "dep": "skipped", "deeper": "skipped", "indep": "completed", "next": "completed"}
    assert event.result["summary"] == "2 of 5 steps completed"
    assert steps["next"]["result"]["inputs"] == {"indep": steps["indep"]["result"]}
    record = await get_job(redis, keys, "wf-cont")
    assert record is not None and record.steps_done == 5


async def test_timeout_expires_the_workflow_while_a_step_sleeps(redis, keys: Keys, producer: Producer, workers: WorkerFactory) -> None:
    start_workers(workers, 1, "--concurrency", "4")
    wf = Workflow("wf-slow", timeout_s=0.5)
    wf.step("nap", "echo", {"sleep_s": 3})
    wf.step("after_nap", "echo", {}, after=["nap"])
    await producer.publish_workflow(wf)
    event = await wait_event(redis, keys, "wf-slow", timeout=20)
    assert event.status == "expired"
    assert "timed out" in (event.error or "")
    assert event.result["steps"]["after_nap"]["status"] == "skipped"
    assert event.result["steps"]["nap"]["status"] == "running"
    # the sleeping step runs on and yields its own event, after the workflow's; the workflow yields no second one
    nap = await wait_event(redis, keys, "wf-slow::nap", timeout=20)
    assert nap.status == "completed"
    assert (await event_counts(redis, keys))["wf-slow"] == 1
    assert any(d.id == "wf-slow" and d.reason == "expired" for d in await list_dead(redis, keys))


async def test_replay_reruns_only_the_failed_step_and_its_dependents(redis, keys: Keys, producer: Producer, workers: WorkerFactory) -> None:
    # Given a workflow whose middle step fails its one attempt (fail_first=1: its second attempt succeeds)
    start_workers(workers, 1, "--concurrency", "4")
    wf = Workflow("wf-replay")
    wf.step("first", "echo", {"n": 1})
    wf.step("flaky", "echo", {"fail_first": 1}, after=["first"], max_attempts=1)
    wf.step("last", "echo", {"n": 3}, after=["flaky"])
    wf.step("side", "echo", {"n": 4})
    await producer.publish_workflow(wf)
    failed = await wait_event(redis, keys, "wf-replay")
    assert failed.status == "failed"
    letters = [d for d in await list_dead(redis, keys) if d.id in ("wf-replay", "wf-replay::flaky")]
    assert {d.id for d in letters} == {"wf-replay", "wf-replay::flaky"}
    # When the workflow's dead letter is replayed
    entry = next(d.entry_id for d in letters if d.id == "wf-replay")
    assert entry is not None
    await replay(redis, keys, entry)
    done = await wait_event(redis, keys, "wf-replay", n=2)
    # Then it completes; completed steps ran once, the failed step and its dependent once more
    assert done.status == "completed", done.error
    counts = await event_counts(redis, keys)
    assert counts["wf-replay::first"] == 1 and counts["wf-replay::side"] == 1
    assert counts["wf-replay::flaky"] == 2 and counts["wf-replay::last"] == 1
    assert done.result["steps"]["last"]["result"]["inputs"]["flaky"]["echo"] == {"fail_first": 1}
    flaky = await get_job(redis, keys, "wf-replay::flaky")
    assert flaky is not None and flaky.attempts == 2
    # and no dead letter is left: the step's went with the workflow's replay
    assert not [d for d in await list_dead(redis, keys) if d.id.startswith("wf-replay")]


async def test_a_workflow_whose_state_expired_is_not_replayed_from_scratch(redis, keys: Keys, producer: Producer,
                                                                         workers: WorkerFactory) -> None:
    # Given a failed workflow whose completed step was paid for, and whose state has since expired
    # (STREAMCREW_JOB_TTL_S after it ended; its dead letter is kept until replayed or purged)
    start_workers(workers, 1, "--concurrency", "4")
    wf = Workflow("wf-expired")
    wf.step("paid", "echo", {"n": 1})
    wf.step("flaky", "echo", {"fail_first": 1}, after=["paid"], max_attempts=1)
    await producer.publish_workflow(wf)
    assert (await wait_event(redis, keys, "wf-expired")).status == "failed"
    await redis.delete(keys.workflow("wf-expired"))
    entry = next(d.entry_id for d in await list_dead(redis, keys) if d.id == "wf-expired")
    assert entry is not None
    # When its dead letter is replayed, alone or with --all
    with pytest.raises(StreamcrewError, match="state .* has expired; replaying would run every step again"):
        await replay(redis, keys, entry)
    replayed, skipped = await replay_all(redis, keys)
    # Then it is refused with the reason (it ran every step again, the completed one paid twice), its letter kept
    assert "wf-expired" not in replayed and any("has expired" in why for why in skipped), (replayed, skipped)
    assert "wf-expired" in {d.id for d in await list_dead(redis, keys)}
    await producer.publish("echo", {}, id="marker-after-refusal")  # one worker, FIFO lane: a stray run would be in by now
    await wait_event(redis, keys, "marker-after-refusal")
    assert (await event_counts(redis, keys))["wf-expired::paid"] == 1


@pytest.mark.parametrize("wid", ["wf-replay-all", "wf-replay-all:"])  # ':' last: its step 'wf-replay-all:::flaky' (ran twice)
async def test_replay_all_runs_a_failed_step_once_through_its_workflow(
    redis, keys: Keys, producer: Producer, workers: WorkerFactory, wid: str,
) -> None:
    # Given a failed workflow: its step's dead letter and its own are both present
    start_workers(workers, 1, "--concurrency", "4")
    wf = Workflow(wid)
    wf.step("flaky", "echo", {"fail_first": 1}, max_attempts=1)
    wf.step("after", "echo", {"n": 2}, after=["flaky"])
    await producer.publish_workflow(wf)
    assert (await wait_event(redis, keys, wid)).status == "failed"
    assert {d.id for d in await list_dead(redis, keys)} == {wid, f"{wid}::flaky"}
    # When every dead letter is replayed (the runbook's `streamcrew dead replay --all`)
    replayed, skipped = await replay_all(redis, keys)
    # Then only the workflow is replayed, and its replay runs the failed step once more: not once alone and once in it
    assert (replayed, skipped) == ([wid], [])
    done = await wait_event(redis, keys, wid, n=2)
    assert done.status == "completed", done.error
    await producer.publish("echo", {}, id="marker-after-replay")  # one worker, FIFO lane: a stray run would be in by now
    await wait_event(redis, keys, "marker-after-replay")
    counts = await event_counts(redis, keys)
    assert counts[f"{wid}::flaky"] == 2 and counts[f"{wid}::after"] == 1, counts
    assert await list_dead(redis, keys) == []



async def test_a_step_replayed_alone_that_fails_again_leaves_no_letter_behind_its_workflows_replay(
    redis, keys: Keys, producer: Producer, workers: WorkerFactory,
) -> None:
    # Given a failed workflow whose step failed, and the step's letter replayed alone, failing again (a new letter)
    start_workers(workers, 1, "--concurrency", "4")
    wf = Workflow("wf-again-alone")
    wf.step("a", "echo", {"fail_first": 2}, max_attempts=1)
    wf.step("b", "echo", {}, after=["a"])
    await producer.publish_workflow(wf)
    assert (await wait_event(redis, keys, "wf-again-alone")).status == "failed"
    first = next(d.entry_id for d in await list_dead(redis, keys) if d.id == "wf-again-alone::a")
    assert first is not None
    await replay(redis, keys, first)
    await wait_until(lambda: _letters_of(redis, keys, "wf-again-alone::a", not_=first), timeout=20, what="the step's second letter")
    # When every dead letter is replayed: the workflow's, which runs the step a third time (now it completes)
    replayed, skipped = await replay_all(redis, keys)
    assert replayed == ["wf-again-alone"], (replayed, skipped)
    assert (await wait_event(redis, keys, "wf-again-alone", n=2)).status == "completed"
    # Then no letter of the workflow or its steps is left (before: the step's second letter stayed, and a replay of it
    # said the step was submitted anew since it died)
    assert [d.id for d in await list_dead(redis, keys)] == []


async def _letters_of(redis, keys: Keys, job_id: str, *, not_: str) -> bool:  # type: ignore[no-untyped-def]
    return any(d.id == job_id and d.entry_id != not_ for d in await list_dead(redis, keys))

async def test_a_resubmitted_workflow_id_runs_once(redis, keys: Keys, producer: Producer, workers: WorkerFactory) -> None:
    wf = Workflow("wf-dup")
    wf.step("a", "echo", {})
    wf.step("b", "echo", {}, after=["a"])
    first = await producer.publish_workflow(wf)
    second = await producer.publish_workflow(wf)
    assert first.created and not second.created
    # a raw XADD of the same id, past the producer's check, is a duplicate too
    await redis.xadd(keys.lane("normal"), {"agent": "workflow", "id": "wf-dup", "data": '{"steps": [{"id": "a", "agent": "echo"}]}'})
    start_workers(workers, 1, "--concurrency", "4")
    await wait_event(redis, keys, "wf-dup")
    again = await producer.publish_workflow(wf)
    assert not again.created
    await producer.publish("echo", {}, id="marker")
    await wait_event(redis, keys, "marker")
    counts = await event_counts(redis, keys)
    assert counts["wf-dup"] == 1 and counts["wf-dup::a"] == 1 and counts["wf-dup::b"] == 1


INVALID = {
    "cycle": ([{"id": "a", "agent": "echo", "after": ["b"]}, {"id": "b", "agent": "echo", "after": ["a"]}], "'a', 'b' form a cycle"),
    "unknown_after": ([{"id": "a", "agent": "echo", "after": ["ghost"]}], "step 'a': after names unknown step 'ghost'"),
    "duplicate_id": ([{"id": "a", "agent": "echo"}, {"id": "a", "agent": "echo"}], "step 'a': duplicate step id"),
    "bad_id": ([{"id": "no spaces", "agent": "echo"}], "step 'no spaces': id must match"),
    "unknown_agent": ([{"id": "a", "agent": "echo"}, {"id": "x", "agent": "nobody"}], "step 'x': unknown agent 'nobody'"),
    "too_many": ([{"id": f"s{i}", "agent": "echo"} for i in range(1001)], "1001 steps, over the limit of 1000"),
    "bad_data": ([{"id": "q", "agent": "ask", "data": {"nope": 1}}], "step 'q': invalid input for agent 'ask'"),
    "bad_step_field": ([{"id": "a", "agent": "echo", "data": "not an object"}], "step 'a': field 'data'"),
}


async def test_each_invalid_workflow_is_rejected_before_any_step_runs(redis, keys: Keys, producer: Producer, workers: WorkerFactory) -> None:
    # Given one workflow per validation error
    for case, (steps, _) in INVALID.items():
        await producer.publish("workflow", {"steps": steps}, id=f"wf-{case}")
    # When a worker takes them
    start_workers(workers, 1, "--concurrency", "2", "--agents", "echo,ask")
    # Then each is rejected with a reason that names the step, and no step job exists
    for case, (_, reason) in INVALID.items():
        event = await wait_event(redis, keys, f"wf-{case}")
        assert event.status == "rejected", case
        assert reason in (event.error or ""), (case, event.error)
        assert [k async for k in redis.scan_iter(match=f"{keys.prefix}:job:wf-{case}:*")] == [], case
        assert not await redis.exists(keys.workflow(f"wf-{case}")), case
    assert await event_counts(redis, keys) == {f"wf-{case}": 1 for case in INVALID}


async def test_design_graph_of_crews_rolls_up_usage(redis, keys: Keys, producer: Producer, workers: WorkerFactory) -> None:
    # Given the design's analysis with the product crew and the ask agent, on the offline LLM
    start_workers(workers, 1, "--concurrency", "8", all_agents=True)
    wf = Workflow("wf-crews")
    for sid, question in (("reviews", "summarise the reviews"), ("pricing", "is the price competitive?"), ("inventory", "how many in stock?")):
        wf.step(sid, "product", {"sku": "SKU-1001", "question": question})
    wf.step("sentiment", "ask", {"prompt": "What is the customers' sentiment?"}, after=["reviews"])
    wf.step("recommend", "ask", {"prompt": "Should we restock or discount SKU-1001?"}, after=["pricing", "inventory", "sentiment"])
    await producer.publish_workflow(wf)
    # When it runs
    event = await wait_event(redis, keys, "wf-crews", timeout=120)
    # Then every step completed with an answer, and the workflow's usage is the sum of its steps'
    assert event.status == "completed", event.error
    steps = event.result["steps"]
    assert all(s["status"] == "completed" and s["result"]["answer"] for s in steps.values())
    step_usage = [(await events_of(redis, keys, f"wf-crews::{sid}"))[0].usage for sid in steps]
    assert all(u for u in step_usage)
    assert event.usage is not None
    for field in ("prompt_tokens", "completion_tokens"):
        assert event.usage[field] == sum(u[field] for u in step_usage)  # type: ignore[index]
    assert abs(event.usage["cost_usd"] - sum(u["cost_usd"] for u in step_usage)) < 1e-9  # type: ignore[index]


async def test_forged_step_fields_do_not_move_a_workflow(redis, keys: Keys, producer: Producer, workers: WorkerFactory) -> None:
    # Given a workflow whose second step waits for a 1 s first step
    start_workers(workers, 1, "--concurrency", "4")
    wf = Workflow("wf-forged")
    wf.step("a", "echo", {"sleep_s": 1})
    wf.step("b", "echo", {"real": True}, after=["a"])
    await producer.publish_workflow(wf)
    # When other requests claim to be its steps (another id with parent/step; the pending step's own id)
    await redis.xadd(keys.lane("normal"), {"agent": "echo", "id": "intruder", "data": "{}", "parent": "wf-forged", "step": "b"})
    await redis.xadd(keys.lane("normal"), {"agent": "echo", "id": "wf-forged::b", "data": '{"forged": true}', "parent": "wf-forged", "step": "b"})
    await wait_event(redis, keys, "intruder")
    # Then the workflow still waits for its own steps and aggregates their real results
    event = await wait_event(redis, keys, "wf-forged")
    assert event.status == "completed"
    b = event.result["steps"]["b"]["result"]
    assert b["echo"] == {"real": True} and b["inputs"] == {"a": event.result["steps"]["a"]["result"]}


async def test_a_workflow_ending_never_trims_results_a_group_has_not_read(redis, keys: Keys, producer: Producer, workers: WorkerFactory) -> None:
    # Given a results stream kept to 5 entries, and 250 results no notifier has read yet (more than one
    # stream node of 100 entries: XADD MAXLEN ~ drops whole nodes)
    workers.start("--concurrency", "8", env={"STREAMCREW_RESULTS_MAXLEN": "5"})
    await producer.publish_many([JobRequest(agent="echo", data={"i": i}, id=f"unread-{i}") for i in range(250)])
    first = (await wait_results(redis, keys, 250, timeout=30))[0]
    # When a workflow ends (its one result event written by the workflow script)
    wf = Workflow("wf-retention")
    wf.step("only", "echo", {})
    await producer.publish_workflow(wf)
    event = await wait_event(redis, keys, "wf-retention")
    assert event.status == "completed"
    # Then every unread result is still there: only the trim, which keeps what groups still need, removes results
    entries = await redis.xrange(keys.results, count=1)
    assert entries[0][1]["id"] == first.id
    assert await redis.xlen(keys.results) >= 252


async def test_the_first_designs_fan_out_runs_as_written(redis, keys: Keys, producer: Producer, workers: WorkerFactory) -> None:
    # Given the first design's complex product analysis with its own agents and sub-task data ({"action": ...}),
    # on the offline LLM
    start_workers(workers, 1, "--concurrency", "8", all_agents=True)
    wf = Workflow("wf-as-written")
    wf.step("reviews", "product_info", {"action": "analyze_reviews"})
    wf.step("pricing", "product_info", {"action": "analyze_pricing"})
    wf.step("inventory", "product_info", {"action": "check_inventory"})
    wf.step("sentiment", "returns_processing", {"action": "sentiment_analysis"}, after=["reviews"])
    wf.step("recommendation", "order_processing", {"action": "generate_recommendation"}, after=["pricing", "sentiment"])
    await producer.publish_workflow(wf)
    # When it runs
    event = await wait_event(redis, keys, "wf-as-written", timeout=120)
    # Then every step completed with an answer, and the later steps were given the earlier ones' answers
    assert event.status == "completed", event.error
    steps = event.result["steps"]
    assert set(steps) == {"reviews", "pricing", "inventory", "sentiment", "recommendation"}
    assert all(s["status"] == "completed" and s["result"]["answer"] for s in steps.values()), steps
    assert event.result["summary"] == "5 of 5 steps completed"
    assert steps["recommendation"]["result"]["agent"] == "order"
    assert "Sentiment analysis." in steps["sentiment"]["result"]["crew"]["task"]
    assert "- reviews: " in steps["sentiment"]["result"]["crew"]["task"]
    assert all(f"- {dep}: " in steps["recommendation"]["result"]["crew"]["task"] for dep in ("pricing", "sentiment"))
    # And no tool was called without the order number it needs (an action names none)
    assert all("validation failed" not in s["result"]["answer"] for s in steps.values()), steps


async def test_a_new_workflow_of_an_old_id_shows_none_of_the_old_steps_records(redis, keys: Keys, producer: Producer, workers: WorkerFactory) -> None:
    # Given acme's workflow that failed fast while a slower step ran on, and whose own record expired before that step's
    workers.start("--concurrency", "4")
    old = Workflow("wf-shared")
    old.step("s1", "echo", {"fail_first": 9}, max_attempts=1)
    old.step("s2", "echo", {"sleep_s": 1, "secret": "ACME"})
    await producer.publish_workflow(old, tenant="acme")
    assert (await wait_event(redis, keys, "wf-shared")).status == "failed"

    async def slow_step_done() -> bool:
        record = await get_job(redis, keys, "wf-shared::s2")
        return record is not None and record.status == "completed"

    await wait_until(slow_step_done, timeout=20, what="the slow step to end after its workflow")
    await redis.delete(keys.job("wf-shared"), f"{keys.prefix}:wf:wf-shared")  # the workflow's record expired first
    # When globex starts a workflow of the same id with a step of the same id
    new = Workflow("wf-shared")
    new.step("s2", "echo", {"mine": "GLOBEX", "sleep_s": 2})
    await producer.publish_workflow(new, tenant="globex")

    async def new_step_on() -> bool:
        record = await get_job(redis, keys, "wf-shared::s2")
        return record is not None and record.status in ("queued", "running")

    await wait_until(new_step_on, timeout=20, what="the new workflow's step queued or running")
    # Then the step's record is the new run's alone: globex's, without acme's result
    record = await get_job(redis, keys, "wf-shared::s2")
    assert record is not None and (record.tenant, record.result, record.finished_at) == ("globex", None, None), record


async def test_a_workflow_whose_step_ids_would_not_be_job_ids_is_rejected_not_left_running(
    redis, keys: Keys, producer: Producer, workers: WorkerFactory,
) -> None:
    # Given a workflow id of 500 characters: its step's job id '<id>::abcdefghijklmnop' would be 518, over 512
    workers.start()
    wf = Workflow("w" * 500)
    wf.step("abcdefghijklmnop", "echo", {})
    await producer.publish_workflow(wf)
    # Then the workflow is rejected, saying why (before: its step was run under a generated id, and the workflow
    # waited for it, running, for ever)
    event = await wait_event(redis, keys, "w" * 500)
    assert event.status == "rejected" and "shorten the workflow's id" in (event.error or ""), event


async def test_a_workflow_that_ends_leaves_the_timeouts_set_at_once(redis, keys: Keys, producer: Producer, workers: WorkerFactory) -> None:
    # Given workflows with a timeout of an hour: one that completes, one that fails
    start_workers(workers, 1, "--concurrency", "4")
    for wid, data in (("wf-quick", {"n": 1}), ("wf-broken", {"fail_first": 1})):
        wf = Workflow(wid, timeout_s=3600)
        wf.step("only", "echo", data, max_attempts=1)
        await producer.publish_workflow(wf)
    # When they end
    assert (await wait_event(redis, keys, "wf-quick")).status == "completed"
    assert (await wait_event(redis, keys, "wf-broken")).status == "failed"
    # Then neither waits in the timeouts set for its hour (each did, and for good with a timeout of 1e308)
    assert await redis.zrange(keys.workflow_timeouts, 0, -1) == []


async def test_replaying_a_workflow_whose_steps_all_completed_after_it_expired_ends_it_at_once(
    redis, keys: Keys, producer: Producer, workers: WorkerFactory,
) -> None:
    # Given a workflow that expired while its one step slept, and the step completed afterwards
    start_workers(workers, 1, "--concurrency", "4")
    wf = Workflow("wf-late", timeout_s=60)
    wf.step("nap", "echo", {"sleep_s": 2})
    await producer.publish_workflow(wf)
    await wait_running(redis, keys, "wf-late::nap")
    await redis.zadd(keys.workflow_timeouts, {"wf-late": 0})  # its timeout due now: expired while the step sleeps
    assert (await wait_event(redis, keys, "wf-late", timeout=20)).status == "expired"
    assert (await wait_event(redis, keys, "wf-late::nap", timeout=20)).status == "completed"
    (letter,) = [d for d in await list_dead(redis, keys) if d.id == "wf-late"]
    # When it is replayed
    await replay(redis, keys, letter.entry_id)
    # Then it ends completed at once, with the step's result (before: running, nothing to run, until its 60 s timeout
    # expired it again with a second dead letter)
    event = await wait_event(redis, keys, "wf-late", n=2, timeout=20)
    assert event.status == "completed" and event.result["steps"]["nap"]["status"] == "completed", event


async def test_a_workflow_past_its_deadline_expires_unstarted_like_any_job(redis, keys: Keys, workers: WorkerFactory) -> None:
    # Given a workflow entry whose deadline passed before any worker took it (contract §2)
    start_workers(workers, 1, "--concurrency", "4")
    data = '{"steps": [{"id": "a", "agent": "echo"}]}'
    await redis.xadd(keys.lane("normal"), {"agent": "workflow", "id": "wf-deadline", "data": data, "deadline": str(now_ms() - 60_000)})
    await producer_marker(redis, keys)
    # Then it ends expired with a dead letter, and no step ran (before: it ran and completed)
    event = await wait_event(redis, keys, "wf-deadline")
    assert event.status == "expired" and "deadline passed" in (event.error or ""), event
    assert "wf-deadline::a" not in await event_counts(redis, keys)
    (letter,) = [d for d in await list_dead(redis, keys) if d.id == "wf-deadline"]
    assert letter.reason == "expired" and letter.entry_id is not None
    # And its replay is its first run (it has no state to keep: the replay was refused as one whose state expired)
    await replay(redis, keys, letter.entry_id)
    done = await wait_event(redis, keys, "wf-deadline", n=2)
    assert done.status == "completed", done


async def producer_marker(redis, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    """A job after the others in the one worker's FIFO lane: once its event is in, a step would have run too."""
    await redis.xadd(keys.lane("normal"), {"agent": "echo", "id": "marker-after-deadline", "data": "{}"})
    await wait_event(redis, keys, "marker-after-deadline")


async def test_a_step_skipped_while_queued_runs_again_on_a_replay_without_its_old_end(
    redis, keys: Keys, producer: Producer, workers: WorkerFactory,
) -> None:
    # Given a workflow whose first step fails while its second waits in the lane (one slot: the second is read
    # only once the first's settle is written), so the workflow ends and skips the waiting step
    start_workers(workers, 1, "--concurrency", "1")
    wf = Workflow("wf-skipped")
    wf.step("a", "echo", {"fail_first": 1}, max_attempts=1)
    wf.step("b", "echo", {"sleep_s": 1})
    await producer.publish_workflow(wf)
    assert (await wait_event(redis, keys, "wf-skipped")).status == "failed"
    skipped = await redis.hgetall(keys.job("wf-skipped::b"))
    assert (skipped["status"], skipped["source"]) == ("skipped", "skipped") and "finished_at" in skipped, skipped
    # When the workflow is replayed and the step runs again
    (letter,) = [d for d in await list_dead(redis, keys) if d.id == "wf-skipped"]
    await replay(redis, keys, letter.entry_id)

    async def running() -> bool:
        return await redis.hget(keys.job("wf-skipped::b"), "status") == "running"

    await wait_until(running, timeout=20, what="the skipped step running again")
    # Then its record is a live job's: no end time, no expiry (before: both kept from its skip, so the record of a
    # step waiting or running could expire under it)
    record = await redis.hgetall(keys.job("wf-skipped::b"))
    assert "finished_at" not in record, record
    assert await redis.ttl(keys.job("wf-skipped::b")) == -1
    # And the workflow completes
    event = await wait_event(redis, keys, "wf-skipped", n=2, timeout=30)
    assert event.status == "completed" and event.result["steps"]["b"]["status"] == "completed", event


async def test_an_earlier_runs_timeout_does_not_expire_a_new_workflow_of_its_id(
    redis, keys: Keys, producer: Producer, workers: WorkerFactory,
) -> None:
    # Given a workflow with a 3 s timeout that completed at once, and whose records then expired (a job TTL shorter
    # than the timeout): its timeout is still due in the timeouts set
    workers.start("--concurrency", "4")
    old = Workflow("wf-again", timeout_s=3)
    old.step("quick", "echo", {})
    await producer.publish_workflow(old)
    assert (await wait_event(redis, keys, "wf-again")).status == "completed"
    await redis.delete(keys.job("wf-again"), f"{keys.prefix}:wf:wf-again")  # its records expired
    # When a new workflow of the same id, without a timeout, runs a step for longer than the old timeout
    new = Workflow("wf-again")
    new.step("slow", "echo", {"sleep_s": 5})
    assert (await producer.publish_workflow(new)).created
    # Then it completes (before: the earlier run's timeout, still in the set, expired it after 3 s)
    event = await wait_event(redis, keys, "wf-again", n=2, timeout=30)
    assert event.status == "completed", event.error
    assert await redis.zscore(keys.workflow_timeouts, "wf-again") is None


async def test_a_workflow_times_out_by_redis_clock_not_by_a_workers(
    redis, keys: Keys, producer: Producer, workers: WorkerFactory, settings: StreamSettings,
) -> None:
    # Given a running workflow with a 60 s timeout (due by Redis' clock, set when it started), one step asleep
    workers.start("--concurrency", "4")
    wf = Workflow("wf-skew", timeout_s=60)
    wf.step("nap", "echo", {"sleep_s": 2})
    await producer.publish_workflow(wf)
    await wait_running(redis, keys, "wf-skew")
    # When a worker whose clock runs an hour ahead looks for due timeouts (a host's clock cannot be moved here: the
    # worker's clock is stood in for)
    skewed = WorkflowStarter(redis, settings, group="workers", worker="skewed", checker=None,  # type: ignore[arg-type]
                             reject=None, release=None)  # type: ignore[arg-type]
    with patch("streams.workflows.now_ms", lambda: now_ms() + 3_600_000, create=True):  # where the worker read its clock
        ended = await skewed.expire_due(keys)
    # Then nothing is due yet (before: the workflow ended expired 59 minutes early), and it completes
    assert ended == 0
    assert (await wait_event(redis, keys, "wf-skew", timeout=30)).status == "completed"


async def test_a_replayed_workflow_whose_deadline_passes_in_the_lane_resumes(
    redis, keys: Keys, producer: Producer, workers: WorkerFactory,
) -> None:
    # Given a workflow with a deadline that started in time, failed, and was replayed before its deadline (so the
    # replay keeps it), and no worker takes the replay until the deadline has passed
    worker = workers.start("--concurrency", "4")
    deadline = now_ms() + 8_000
    wf = Workflow("wf-late-replay")
    wf.step("flaky", "echo", {"fail_first": 1}, max_attempts=1)
    await producer.publish("workflow", wf.to_data(), id="wf-late-replay", deadline=deadline)
    assert (await wait_event(redis, keys, "wf-late-replay")).status == "failed"
    assert worker.stop() == 0
    (letter,) = [d for d in await list_dead(redis, keys) if d.id == "wf-late-replay"]
    await replay(redis, keys, letter.entry_id)
    await wait_until(lambda: now_ms() > deadline + 100, timeout=15, what="the workflow's deadline passing")
    # When a worker takes it
    workers.start("--concurrency", "4")
    # Then it resumes, as a job that started in time runs again (before: it was run as an agent named 'workflow'
    # and ended failed, "unknown agent 'workflow'")
    event = await wait_event(redis, keys, "wf-late-replay", n=2)
    assert event.status == "completed", event.error
    assert (await event_counts(redis, keys))["wf-late-replay::flaky"] == 2


async def test_a_step_whose_input_check_raises_rejects_the_workflow_not_the_worker(
    redis, keys: Keys, producer: Producer, workers: WorkerFactory,
) -> None:
    # Given a workflow whose step input makes its agent's validator raise AttributeError, and a job sent after it
    start_workers(workers, 1, "--concurrency", "4", "--app", "tests.workflows.validator_app")
    wf = Workflow("wf-raises")
    wf.step("a", "echo", {})
    wf.step("b", "shout", {"name": 5})
    await producer.publish_workflow(wf)
    await producer.publish("echo", {}, id="after-raises")
    # When a worker takes them
    event = await wait_event(redis, keys, "wf-raises", timeout=20)
    # Then the workflow ends rejected, naming the step, and no step ran (before: the exception left the worker's read
    # of the batch, so the workflow, and every job read with it, stayed pending for good, taken up at each reclaim)
    assert event.status == "rejected" and "step 'b'" in (event.error or "") and "AttributeError" in (event.error or ""), event
    assert (await wait_event(redis, keys, "after-raises")).status == "completed"
    counts = await event_counts(redis, keys)
    assert "wf-raises::a" not in counts and counts["wf-raises"] == 1, counts


async def test_a_workflow_whose_step_data_cannot_be_written_rejects_it_not_its_batch(redis, keys: Keys, workers: WorkerFactory) -> None:
    # Given, XADDed raw in one go, a job, a workflow whose step's data nests 256 levels (orjson reads 1,023, writes 255),
    # a second job and a good workflow: one read of the worker takes them all
    await redis.xgroup_create(keys.lane("normal"), "workers", id="0", mkstream=True)
    deep = '{"steps": [{"id": "s1", "agent": "echo", "data": ' + '{"a":' * 256 + "1" + "}" * 256 + "}]}"
    good = '{"steps": [{"id": "s1", "agent": "echo", "data": {}}]}'
    async with redis.pipeline(transaction=True) as pipe:
        pipe.xadd(keys.lane("normal"), {"agent": "echo", "id": "job-before", "data": "{}"})
        pipe.xadd(keys.lane("normal"), {"agent": "workflow", "id": "wf-deep", "data": deep})
        pipe.xadd(keys.lane("normal"), {"agent": "echo", "id": "job-after", "data": "{}"})
        pipe.xadd(keys.lane("normal"), {"agent": "workflow", "id": "wf-fine", "data": good})
        await pipe.execute()
    # When a worker takes them
    start_workers(workers, 1, "--concurrency", "8")
    # Then that workflow is rejected with the reason, and everything read with it ends as it should
    deep_event = await wait_event(redis, keys, "wf-deep", timeout=20)
    assert deep_event.status == "rejected" and "could not be planned" in (deep_event.error or ""), deep_event
    for job_id in ("job-before", "job-after", "wf-fine"):
        assert (await wait_event(redis, keys, job_id, timeout=20)).status == "completed", job_id
    assert (await redis.xpending(keys.lane("normal"), "workers"))["pending"] == 0


async def test_the_reason_a_large_workflow_is_rejected_is_bounded(redis, keys: Keys, workers: WorkerFactory) -> None:
    # Given a workflow of 1,000 steps, each with an empty agent: 1,000 problems
    steps = [{"id": f"s{i}", "agent": "", "data": {}} for i in range(1000)]
    await redis.xadd(keys.lane("normal"), {"agent": "workflow", "id": "wf-many-bad", "data": JobRequest(agent="x", data={"steps": steps}).to_fields()["data"]})
    start_workers(workers, 1)
    # Then it is rejected with an error of bounded size, in the event and the dead letter alike
    event = await wait_event(redis, keys, "wf-many-bad", timeout=20)
    assert event.status == "rejected" and "characters cut" in (event.error or "") and len(event.error or "") < 5000, len(event.error or "")
    (letter,) = [d for d in await list_dead(redis, keys) if d.id == "wf-many-bad"]
    assert letter.error == event.error
