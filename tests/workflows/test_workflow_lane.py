"""A workflow's lane (contract §13, §9): a ``priority`` 0-10 in its data picks it when the producer is given none, and
its steps run in that lane."""

from __future__ import annotations

from streams.keys import Keys
from streams.producer import Producer
from streams.records import get_job
from tests.support import WorkerFactory
from tests.workflows.support import start_workers, wait_event

STEPS = [{"id": "a", "agent": "echo", "data": {"n": 1}}, {"id": "b", "agent": "echo", "data": {"n": 2}, "after": ["a"]}]


async def test_a_priority_in_a_workflows_data_picks_its_lane_and_its_steps_run_there(
    redis, keys: Keys, producer: Producer, workers: WorkerFactory,
) -> None:
    # Given a workflow whose data holds priority 9, published without a priority, and one whose explicit lane wins
    high = await producer.publish("workflow", {"steps": STEPS, "priority": 9}, id="wf-prio-high")
    low = await producer.publish("workflow", {"steps": STEPS, "priority": 9}, id="wf-prio-low", priority="low")
    assert (high.lane, low.lane) == ("high", "low")
    # When a worker takes them
    start_workers(workers, 1, "--concurrency", "4")
    # Then each completes (before: rejected, "field 'priority': Extra inputs are not permitted"), its steps in its lane
    for wf_id, lane in (("wf-prio-high", "high"), ("wf-prio-low", "low")):
        event = await wait_event(redis, keys, wf_id)
        assert event.status == "completed", event.error
        for sid in ("a", "b"):
            step = await get_job(redis, keys, f"{wf_id}::{sid}")
            assert step is not None and (step.status, step.lane) == ("completed", lane), (wf_id, sid, step)
    assert [f["id"] for _, f in await redis.xrange(keys.lane("high"))] == ["wf-prio-high", "wf-prio-high::a", "wf-prio-high::b"]
