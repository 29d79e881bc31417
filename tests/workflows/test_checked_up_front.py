"""A workflow with a step that cannot run on this worker is rejected before any step runs (contract §9)."""

from __future__ import annotations

import json

from streams.envelope import dumps
from streams.keys import Keys
from streams.producer import Producer
from streams.raw import request_bytes
from streams.workflow import Workflow
from tests.support import WorkerFactory, wait_for_log
from tests.workflows.support import event_counts, start_workers, wait_event

EXTRA = "pip install 'streamcrew[crewai]'"


async def test_a_crew_step_on_a_worker_without_crewai_rejects_the_workflow(
    redis, keys: Keys, producer: Producer, workers: WorkerFactory,
) -> None:
    # Given a worker without CrewAI (its crews are stand-ins whose jobs end rejected)
    (worker,) = start_workers(workers, 1, "--concurrency", "4", "--app", "tests.workflows.no_crewai_app")
    wait_for_log(worker, EXTRA)  # it says so at start: CrewAI is really absent for it
    # And workflows with a crew step, under its name and the first design's
    for wf_id, agent in (("wf-crew", "product"), ("wf-design-crew", "product_info")):
        wf = Workflow(wf_id)
        wf.step("a", "echo", {})
        wf.step("b", agent, {"sku": "SKU-001", "question": "in stock?"}, after=["a"])
        await producer.publish_workflow(wf)
    # When the worker takes them
    for wf_id, agent in (("wf-crew", "product"), ("wf-design-crew", "product_info")):
        event = await wait_event(redis, keys, wf_id)
        # Then each ends rejected up front, naming the step and what to install, and no step ran (before: it
        # started, ran 'a', and failed at 'b')
        assert event.status == "rejected", (wf_id, event.status, event.error)
        assert "step 'b'" in (event.error or "") and agent in (event.error or "") and EXTRA in (event.error or ""), event.error
    counts = await event_counts(redis, keys)
    assert counts == {"wf-crew": 1, "wf-design-crew": 1}, counts


async def test_a_workflow_whose_step_request_would_pass_the_size_limit_is_rejected(
    redis, keys: Keys, producer: Producer, workers: WorkerFactory,
) -> None:
    # Given a workflow with a long id whose one step holds nearly all its data: the step's request (its data, the
    # workflow's id as its parent and in its own id) is larger than the workflow's
    wf_id = "wf-" + "x" * 200
    wf = Workflow(wf_id)
    wf.step("a", "echo", {"pad": "y" * 2000})
    await producer.publish_workflow(wf)
    await producer.publish("echo", {}, id="after-big")
    ((_, fields), _) = await redis.xrange(keys.lane("normal"))
    limit = request_bytes(fields)
    # And a worker whose STREAMCREW_MAX_REQUEST_BYTES the workflow's request just fits
    workers.start("--concurrency", "4", env={"STREAMCREW_MAX_REQUEST_BYTES": str(limit)})
    # When it takes the workflow
    event = await wait_event(redis, keys, wf_id)
    # Then the workflow is rejected up front, naming the step and the limit, and no step ran (before: it started,
    # and its step ended rejected, 'request is ... bytes, over the limit', failing the workflow)
    assert event.status == "rejected", (event.status, event.error)
    assert "step 'a'" in (event.error or "") and f"{limit}-byte" in (event.error or ""), event.error
    assert (await wait_event(redis, keys, "after-big")).status == "completed"
    assert await event_counts(redis, keys) == {wf_id: 1, "after-big": 1}


async def test_an_id_less_workflow_is_checked_with_the_longest_id_its_steps_can_get(redis, keys: Keys, workers: WorkerFactory) -> None:
    # Given an id-less workflow (a raw XADD) whose job id, its entry ID, is taken by a job of another lane (the same
    # entry ID there, which ran first): the workflow is named '<lane>:<entry ID>', 7 characters longer in the normal lane
    entry_id, sid = "1700000000000-1", "s" * 12
    data = {"pad": "y" * 300}
    step = {"agent": "echo", "data": dumps(data), "step": sid}
    short = request_bytes({**step, "id": f"{entry_id}::{sid}", "parent": entry_id})
    renamed = request_bytes({**step, "id": f"normal:{entry_id}::{sid}", "parent": f"normal:{entry_id}"})
    wf_fields = {"agent": "workflow", "data": json.dumps({"steps": [{"id": sid, "agent": "echo", "data": data}]})}
    # And a worker whose STREAMCREW_MAX_REQUEST_BYTES the step's request exactly fits with the entry ID as the
    # workflow's id, and passes by 14 bytes (the lane's name twice) with the longer one; the workflow itself fits
    limit = short
    assert (renamed, request_bytes(wf_fields) <= limit) == (limit + 14, True)
    await redis.xadd(keys.lane("high"), {"agent": "echo", "data": "{}"}, id=entry_id)
    workers.start("--concurrency", "4", env={"STREAMCREW_MAX_REQUEST_BYTES": str(limit)})
    assert (await wait_event(redis, keys, entry_id)).status == "completed"
    # When the workflow comes in the normal lane under the same entry ID
    await redis.xadd(keys.lane("normal"), wf_fields, id=entry_id)
    event = await wait_event(redis, keys, f"normal:{entry_id}")
    # Then it is rejected up front, its step counted with the longer id (before: it started, and its step ended
    # rejected, 'request is ... bytes, over the limit', failing the workflow)
    assert event.status == "rejected", (event.status, event.error)
    assert (event.error or "").startswith(f"step '{sid}': its request would be {limit + 14} bytes, over the {limit}-byte limit"), event.error
    assert await event_counts(redis, keys) == {entry_id: 1, f"normal:{entry_id}": 1}
