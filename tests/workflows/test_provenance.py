"""A workflow's dead letter says where it came from as a job's does (contract §3): ``source_id`` the entry the
producer wrote, ``last_source_id`` the entry it last ran from (a replay's), which a replay of the letter checks."""

from __future__ import annotations

from streams.dead import list_dead, replay
from streams.keys import Keys
from streams.producer import Producer
from streams.workflow import Workflow
from tests.support import WorkerFactory
from tests.workflows.support import events_of, start_workers, wait_event, wait_running


async def test_a_workflows_dead_letter_names_the_entry_it_last_ran_from(redis, keys: Keys, producer: Producer, workers: WorkerFactory) -> None:
    # Given a workflow whose one step fails every attempt, the entry its producer wrote
    wf = Workflow("wf-source")
    wf.step("doomed", "echo", {"fail_first": 9}, max_attempts=1)
    await producer.publish_workflow(wf)
    ((written, _),) = await redis.xrange(keys.lane("normal"))  # read before a worker starts it: its step joins the lane
    start_workers(workers, 1, "--concurrency", "4")
    assert (await wait_event(redis, keys, "wf-source")).status == "failed"
    # Then its dead letter names that entry as its source and as the one it last ran from (before: no last_source_id)
    (first,) = [d for d in await list_dead(redis, keys) if d.id == "wf-source"]
    assert (first.reason, first.source_stream, first.source_id, first.last_source_id) == ("step_failed", keys.lane("normal"), written, written)
    # When the letter is replayed and the workflow fails again
    assert first.entry_id is not None
    await replay(redis, keys, first.entry_id)
    assert (await wait_event(redis, keys, "wf-source", n=2)).status == "failed"
    # Then the new letter still names the entry the producer wrote, and the replay's entry apart, as a job's does
    (second,) = [d for d in await list_dead(redis, keys) if d.id == "wf-source"]
    assert second.source_id == written, (second.source_id, written)
    assert second.last_source_id is not None and second.last_source_id > written
    # And it can be replayed in turn (the replay checks the record still names the entry the letter last ran from)
    assert second.entry_id is not None
    await replay(redis, keys, second.entry_id)
    assert (await wait_event(redis, keys, "wf-source", n=3)).status == "failed"


async def test_a_workflow_replayed_while_its_step_runs_replayed_alone_adopts_that_run(
    redis, keys: Keys, producer: Producer, workers: WorkerFactory,
) -> None:
    # Given a workflow whose one step (3 s) fails its one attempt, so both end in dead letters
    wf = Workflow("wf-adopt")
    wf.step("s", "echo", {"sleep_s": 3, "fail_first": 1}, max_attempts=1)
    await producer.publish_workflow(wf)
    worker = start_workers(workers, 1, "--concurrency", "4")[0]
    assert (await wait_event(redis, keys, "wf-adopt", timeout=30)).status == "failed"
    letters = {d.id: d for d in await list_dead(redis, keys)}
    # When the step's letter is replayed alone, and the workflow's while that run still runs
    await replay(redis, keys, letters["wf-adopt::s"].entry_id or "")
    await wait_running(redis, keys, "wf-adopt::s")
    await replay(redis, keys, letters["wf-adopt"].entry_id or "")
    # Then the workflow adopts the step's run: it ends completed with that run's result, and the run is not taken over
    # (before: the step was published again, the lone replay's run fenced off without an event, the step run twice)
    assert (await wait_event(redis, keys, "wf-adopt", n=2, timeout=30)).status == "completed"
    step_events = await events_of(redis, keys, "wf-adopt::s")
    assert [e.status for e in step_events] == ["failed", "completed"], step_events
    assert "outcome=fenced" not in worker.log_text()
