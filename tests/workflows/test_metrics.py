"""The worker's workflow metrics match the workflows it ran."""

import httpx

from streams.keys import Keys
from streams.producer import Producer
from streams.workflow import Workflow
from tests.consumers.test_metrics import _samples
from tests.support import WorkerFactory, wait_until
from tests.workflows.support import wait_event


async def test_workflow_metrics_count_each_ending(redis, keys: Keys, producer: Producer, workers: WorkerFactory) -> None:
    # Given a worker exporting metrics, and 2 workflows that complete, 1 that fails, 1 that expires and 1 that is invalid
    _, port = workers.start_serving_metrics("--concurrency", "8")
    for i in range(2):
        ok = Workflow(f"ok-{i}")
        ok.step("a", "echo", {})
        ok.step("b", "echo", {}, after=["a"])
        await producer.publish_workflow(ok)
    bad = Workflow("bad")
    bad.step("a", "echo", {"fail_first": 9}, max_attempts=1)
    await producer.publish_workflow(bad)
    slow = Workflow("slow", timeout_s=0.3)
    slow.step("a", "echo", {"sleep_s": 2})
    await producer.publish_workflow(slow)
    await producer.publish("workflow", {"steps": [{"id": "a", "agent": "echo", "after": ["a"]}]}, id="invalid")
    for wid in ("ok-0", "ok-1", "bad", "slow", "invalid"):
        await wait_event(redis, keys, wid)

    async def scraped() -> dict:  # type: ignore[type-arg]
        async with httpx.AsyncClient() as client:
            return _samples((await client.get(f"http://127.0.0.1:{port}/metrics")).text)

    def total(m: dict, status: str) -> float:  # type: ignore[type-arg]
        return m.get(("streamcrew_workflows_total", (("status", status),)), 0.0)

    async def counted() -> bool:
        return total(await scraped(), "completed") == 2

    await wait_until(counted, timeout=10, what="workflows_total{completed} to reach 2")
    m = await scraped()
    # Then each ending is counted once, and every started workflow has a duration
    assert (total(m, "completed"), total(m, "failed"), total(m, "expired"), total(m, "rejected")) == (2, 1, 1, 1)
    assert m[("streamcrew_workflow_duration_seconds_count", ())] == 4
    # and the steps are counted like any job
    assert m[("streamcrew_jobs_total", (("agent", "echo"), ("status", "completed")))] >= 4
