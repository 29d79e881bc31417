"""A workflow with a step that cannot run on this worker is rejected before any step runs (contract §9)."""

from __future__ import annotations

from streams.keys import Keys
from streams.producer import Producer
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
