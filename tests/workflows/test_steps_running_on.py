"""Steps that had started when their workflow failed run on (contract §9): its result lists each with its own status."""

from __future__ import annotations

from streams.keys import Keys
from streams.producer import Producer
from streams.records import get_job
from streams.workflow import Workflow
from tests.support import WorkerFactory, wait_until
from tests.workflows.support import event_counts, wait_event


async def test_a_step_retrying_when_its_workflow_fails_is_listed_retrying_and_runs_on(
    redis, keys: Keys, producer: Producer, workers: WorkerFactory,
) -> None:
    # Given one worker with one slot and retries minutes apart: 'flaky' fails its first attempt and waits to retry,
    # then 'boom' (after it in the lane) fails for good
    workers.start("--concurrency", "1", env={"STREAMCREW_RETRY_BACKOFF_S": "600"})
    wf = Workflow("wf-retrying")
    wf.step("flaky", "echo", {"fail_first": 1}, max_attempts=2)
    wf.step("boom", "echo", {"fail_first": 5}, max_attempts=1)
    await producer.publish_workflow(wf)
    # When the workflow fails
    event = await wait_event(redis, keys, "wf-retrying")
    # Then its result lists 'flaky' as its own record says: retrying (contract §4's status), not running
    assert event.status == "failed" and "boom" in (event.error or ""), event
    flaky = await get_job(redis, keys, "wf-retrying::flaky")
    assert flaky is not None and flaky.status == "retrying", flaky
    assert event.result["steps"]["flaky"] == {"status": "retrying"}, event.result
    # And when its retry falls due, it runs on and yields its own result event, and the workflow no second one
    (member,) = await redis.zrange(keys.delayed, 0, -1)
    await redis.zadd(keys.delayed, {member: 0}, xx=True)
    assert (await wait_event(redis, keys, "wf-retrying::flaky")).status == "completed"

    async def settled() -> bool:
        record = await get_job(redis, keys, "wf-retrying::flaky")
        return record is not None and record.status == "completed"

    await wait_until(settled, timeout=10, what="wf-retrying::flaky's record completed")
    assert (await event_counts(redis, keys))["wf-retrying"] == 1
