"""Helpers of the workflow tests: wait for a job's result event, count events per id; workflows over partitions."""

from __future__ import annotations

from collections import Counter
from typing import Any

from streams.envelope import JobResult
from streams.keys import Keys, partition_keys, partition_of
from streams.records import get_job
from streams.workflow import Workflow, step_job_id
from tests.support import WorkerFactory, results, wait_for_log, wait_until

READY_TIMEOUT_S = 90.0  # a worker imports CrewAI at start: slow on a loaded machine


def start_workers(workers: WorkerFactory, n: int, *args: str, all_agents: bool = False) -> list[Any]:
    """Start ``n`` workers side by side, then wait until each is ready (``all_agents``: the crews too)."""
    children = [workers.start(*args, wait_ready=False, all_agents=all_agents) for _ in range(n)]
    for child in children:
        wait_for_log(child, " ready: ", timeout=READY_TIMEOUT_S)
    return children


async def events_of(redis: Any, keys: Keys, job_id: str) -> list[JobResult]:
    return [r for r in await results(redis, keys) if r.id == job_id]


async def wait_event(redis: Any, keys: Keys, job_id: str, *, timeout: float = 30.0, n: int = 1) -> JobResult:
    """The ``n``-th result event of ``job_id`` (waits for it)."""

    async def arrived() -> bool:
        return len(await events_of(redis, keys, job_id)) >= n

    await wait_until(arrived, timeout=timeout, what=f"result event #{n} of {job_id}")
    return (await events_of(redis, keys, job_id))[n - 1]


async def wait_running(redis: Any, keys: Keys, job_id: str, *, timeout: float = 20.0) -> None:
    """Until the record of ``job_id`` (a workflow, or a step) says running."""
    async def running() -> bool:
        record = await get_job(redis, keys, job_id)
        return record is not None and record.status == "running"

    await wait_until(running, timeout=timeout, what=f"{job_id} running")


async def event_counts(redis: Any, keys: Keys) -> Counter[str]:
    return Counter(r.id for r in await results(redis, keys))


def diamond(wf_id: str | None, tag: int) -> Workflow:
    """a -> (b, c) -> d: fan-out to two steps and a fan-in of both."""
    wf = Workflow(wf_id)
    wf.step("a", "echo", {"tag": tag})
    wf.step("b", "echo", {"tag": tag, "side": "b"}, after=["a"])
    wf.step("c", "echo", {"tag": tag, "side": "c"}, after=["a"])
    wf.step("d", "echo", {"tag": tag}, after=["b", "c"])
    return wf


async def results_by_partition(redis: Any, keys: Keys, partitions: int) -> list[tuple[int, JobResult]]:
    """Every result event of every partition, with the partition whose results stream holds it."""
    out: list[tuple[int, JobResult]] = []
    for p, part in enumerate(partition_keys(keys, partitions)):
        out += [(p, JobResult.from_fields(f)) for _, f in await redis.xrange(part.results)]
    return out


async def wait_partitioned_results(redis: Any, keys: Keys, partitions: int, n: int, *, timeout: float) -> list[tuple[int, JobResult]]:
    async def enough() -> bool:
        return sum([int(await redis.xlen(p.results)) for p in partition_keys(keys, partitions)]) >= n

    await wait_until(enough, timeout=timeout, what=f"{n} result events over {partitions} partitions")
    return await results_by_partition(redis, keys, partitions)


async def check_diamonds_in_their_partitions(
    redis: Any, keys: Keys, partitions: int, wf_ids: list[str], *, others: frozenset[str] = frozenset(),
) -> None:
    """Each diamond workflow and each of its steps: one completed result event, in the workflow's partition (where its
    id alone finds it); the fan-in saw exactly both of ``d``'s inputs. ``others``: ids of the test's other jobs."""
    got = [(p, r) for p, r in await results_by_partition(redis, keys, partitions) if r.id not in others]
    counts = Counter(r.id for _, r in got)
    want = {*wf_ids, *(step_job_id(w, s) for w in wf_ids for s in "abcd")}
    assert set(counts) == want, (sorted(want - set(counts))[:5], sorted(set(counts) - want)[:5])
    assert max(counts.values()) == 1, [i for i, n in counts.items() if n > 1][:5]
    where = {r.id: p for p, r in got}
    by_id = {r.id: r for _, r in got}
    for wid in wf_ids:
        home = partition_of(wid, partitions)
        assert [where[step_job_id(wid, s)] for s in "abcd"] == [home] * 4 and where[wid] == home, wid
        steps = by_id[wid].result["steps"]
        assert by_id[wid].status == "completed" and by_id[wid].result["summary"] == "4 of 4 steps completed", by_id[wid]
        assert steps["d"]["result"]["inputs"] == {"b": steps["b"]["result"], "c": steps["c"]["result"]}, wid
        assert steps["b"]["result"]["inputs"] == {"a": steps["a"]["result"]}, wid
    for wid in wf_ids[:: max(1, len(wf_ids) // 8)]:  # found by id alone: the workflow (with its steps) and a step
        record = await get_job(redis, keys, wid, partitions=partitions)
        assert record is not None and record.status == "completed" and record.steps_done == 4, (wid, record)
        assert [s["job_id"] for s in record.steps or []] == [step_job_id(wid, s) for s in "abcd"]
        step = await get_job(redis, keys, step_job_id(wid, "d"), partitions=partitions)
        assert step is not None and (step.status, step.parent, step.step) == ("completed", wid, "d"), step
