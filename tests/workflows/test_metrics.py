"""The worker's workflow metrics match the workflows it ran."""

from collections import Counter

import httpx

from streams.dead import list_dead, replay
from streams.envelope import now_ms
from streams.keys import Keys
from streams.producer import Producer
from streams.workflow import Workflow
from tests.consumers.test_metrics import _samples
from tests.support import WorkerFactory, results, wait_until
from tests.workflows.support import wait_event, wait_running


async def test_workflow_metrics_count_each_ending(redis, keys: Keys, producer: Producer, workers: WorkerFactory) -> None:
    # Given a worker exporting metrics, and 2 workflows that complete, 1 that fails, 1 that expires and 1 that is invalid
    _, port = workers.start_serving_metrics("--concurrency", "8")
    for i in range(2):
        ok = Workflow(f"ok-{i}")
        ok.step("a", "echo", {})
        ok.step("b", "echo", {}, after=["a"])
        await producer.publish_workflow(ok)
    await publish_failing_and_expiring(producer, "bad", "slow")
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
    # and the workflows' own results under agent="workflow", the invalid one too (before: agent="_unknown")
    assert m[("streamcrew_jobs_total", (("agent", "workflow"), ("status", "rejected")))] == 1
    assert ("streamcrew_jobs_total", (("agent", "_unknown"), ("status", "rejected"))) not in m


async def test_workflows_ended_outside_a_steps_settle_are_counted(redis, keys: Keys, producer: Producer, workers: WorkerFactory) -> None:
    # Given a worker exporting metrics, a workflow whose deadline passed before it was taken (it ends expired unstarted)
    _, port = workers.start_serving_metrics("--concurrency", "4")
    data = '{"steps": [{"id": "a", "agent": "echo"}]}'
    await redis.xadd(keys.lane("normal"), {"agent": "workflow", "id": "wf-unstarted", "data": data, "deadline": str(now_ms() - 60_000)})
    assert (await wait_event(redis, keys, "wf-unstarted")).status == "expired"
    # and a workflow that expired while its step slept, the step completing afterwards, then replayed (it ends completed
    # at its start: nothing left to run)
    wf = Workflow("wf-late", timeout_s=60)
    wf.step("nap", "echo", {"sleep_s": 1})
    await producer.publish_workflow(wf)
    await wait_running(redis, keys, "wf-late::nap")
    await redis.zadd(keys.workflow_timeouts, {"wf-late": 0})
    assert (await wait_event(redis, keys, "wf-late")).status == "expired"
    assert (await wait_event(redis, keys, "wf-late::nap")).status == "completed"
    (letter,) = [d for d in await list_dead(redis, keys) if d.id == "wf-late"]
    await replay(redis, keys, letter.entry_id)
    assert (await wait_event(redis, keys, "wf-late", n=2)).status == "completed"
    # Then each ending is counted (before: neither the unstarted expiry nor the completion at the replay's start)
    async def counted() -> dict[str, float]:
        async with httpx.AsyncClient() as client:
            m = _samples((await client.get(f"http://127.0.0.1:{port}/metrics")).text)
        return {s: m.get(("streamcrew_workflows_total", (("status", s),)), 0.0) for s in ("completed", "expired")}

    want = {"completed": 1, "expired": 2}

    async def all_counted() -> bool:
        return await counted() == want

    try:
        await wait_until(all_counted, timeout=10, what=f"workflows_total to reach {want}")
    except AssertionError:
        raise AssertionError(f"workflows_total {await counted()}, want {want}") from None


async def test_every_result_and_dead_letter_of_a_workflow_is_counted(redis, keys: Keys, producer: Producer, workers: WorkerFactory) -> None:
    # Given a worker exporting metrics, a workflow that completes, one whose step fails and one that expires
    _, port = workers.start_serving_metrics("--concurrency", "8")
    ok = Workflow("wf-ok")
    ok.step("a", "echo", {})
    await producer.publish_workflow(ok)
    await publish_failing_and_expiring(producer, "wf-bad", "wf-slow")
    for wid, status in (("wf-ok", "completed"), ("wf-bad", "failed"), ("wf-slow", "expired")):
        assert (await wait_event(redis, keys, wid)).status == status
    await wait_event(redis, keys, "wf-slow::a")
    # Then the counters agree with what Redis holds: jobs_total with the result events by status (the workflows' own
    # included), dead_letters_total with the dead letters by reason (a workflow's step_failed and expired included)
    events = Counter(r.status for r in await results(redis, keys))
    letters = Counter(d.reason for d in await list_dead(redis, keys))
    assert letters == {"exhausted": 1, "step_failed": 1, "expired": 1}

    def counted(m: dict, name: str, label: str) -> Counter[str]:  # type: ignore[type-arg]
        out: Counter[str] = Counter()
        for (sample, labels), value in m.items():
            if sample == name and value:
                out[dict(labels)[label]] += int(value)
        return out

    async def scraped() -> dict:  # type: ignore[type-arg]
        async with httpx.AsyncClient() as client:
            return _samples((await client.get(f"http://127.0.0.1:{port}/metrics")).text)

    async def agree() -> bool:
        m = await scraped()
        return counted(m, "streamcrew_jobs_total", "status") == events and counted(m, "streamcrew_dead_letters_total", "reason") == letters

    try:
        await wait_until(agree, timeout=10, what="jobs_total and dead_letters_total to match the results and dead letters")
    except AssertionError:
        m = await scraped()
        raise AssertionError(f"jobs_total {counted(m, 'streamcrew_jobs_total', 'status')} for results {events}; "
                             f"dead_letters_total {counted(m, 'streamcrew_dead_letters_total', 'reason')} for dead letters {letters}") from None
    m = await scraped()
    by_status = {dict(labels)["status"]: v for (name, labels), v in m.items() if name == "streamcrew_jobs_total" and ("agent", "workflow") in labels}
    assert by_status == {"completed": 1, "failed": 1, "expired": 1}


async def publish_failing_and_expiring(producer: Producer, bad: str, slow: str) -> None:
    """Workflow ``bad``, whose one step fails its only attempt, and ``slow``, whose step outlives its 0.3 s timeout."""
    failing = Workflow(bad)
    failing.step("a", "echo", {"fail_first": 9}, max_attempts=1)
    await producer.publish_workflow(failing)
    expiring = Workflow(slow, timeout_s=0.3)
    expiring.step("a", "echo", {"sleep_s": 2})
    await producer.publish_workflow(expiring)
