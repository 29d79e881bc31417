"""Chaos: workflows on workers SIGKILLed and replaced; every step and every workflow yields one result event."""

import asyncio
import random
import time
from collections import Counter

import pytest

from streams.keys import Keys, partition_of
from streams.producer import Producer
from streams.workflow import Workflow
from tests.support import WorkerFactory
from tests.workflows.support import results_by_partition, start_workers, wait_partitioned_results

WORKFLOWS = 200
KILL_EVERY_S = 1.5
CHAOS_FOR_S = 10.0


def build(i: int, rng: random.Random) -> tuple[Workflow, dict[str, str]]:
    """A random DAG of 5-10 echo steps and the status each step must end with."""
    doomed = i % 10 == 0  # one step fails for good; on_failure continue makes every status deterministic
    wf = Workflow(f"w{i}", on_failure="continue" if doomed else "fail")
    n = rng.randint(5, 10)
    after: dict[str, list[str]] = {}
    bad = rng.randrange(n) if doomed else -1
    for s in range(n):
        sid = f"s{s}"
        deps = rng.sample([f"s{p}" for p in range(s)], k=min(s, rng.randint(0, 2)))
        after[sid] = deps
        data: dict[str, object] = {"sleep_s": rng.choice([0.05, 0.1, 0.2]), "w": i, "s": s}
        if s == bad:
            data["fail_first"] = 100
            wf.step(sid, "echo", data, after=deps, max_attempts=2)
        else:
            if rng.random() < 0.15:
                data["fail_first"] = 1  # fails once, retried
            wf.step(sid, "echo", data, after=deps, max_attempts=20)
    expected: dict[str, str] = {}
    for s in range(n):
        sid = f"s{s}"
        if s == bad:
            expected[sid] = "failed"
        elif any(expected[d] != "completed" for d in after[sid]):
            expected[sid] = "skipped"
        else:
            expected[sid] = "completed"
    return wf, expected


@pytest.mark.parametrize("partitions", [1, 4])
async def test_workflows_under_worker_kills_lose_and_duplicate_nothing(redis, keys: Keys, workers: WorkerFactory, partitions: int, capsys) -> None:
    # Given 200 workflows of 5-10 steps (some steps fail once and retry, every tenth has a step that fails for good),
    # in one partition or spread over four
    rng = random.Random(12)
    plans = [build(i, rng) for i in range(WORKFLOWS)]
    args = ("--concurrency", "10", "--lease", "2")
    workers.env["STREAMCREW_PARTITIONS"] = str(partitions)
    producer = Producer(redis, keys, partitions=partitions)
    live = start_workers(workers, 3, *args)
    for wf, _ in plans:
        await producer.publish_workflow(wf)
    # When one worker of three is SIGKILLed every 1.5 s for 10 s and replaced
    t0 = time.monotonic()
    kills = 0
    while (next_kill := t0 + KILL_EVERY_S * (kills + 1)) <= t0 + CHAOS_FOR_S:
        await asyncio.sleep(max(0.0, next_kill - time.monotonic()))  # the chaos schedule itself, not a synchronisation
        victim = live.pop(0)
        await asyncio.to_thread(victim.kill)
        kills += 1
        live.append(workers.start(*args, wait_ready=False))
    steps_expected = sum(1 for _, exp in plans for st in exp.values() if st != "skipped")

    await wait_partitioned_results(redis, keys, partitions, WORKFLOWS + steps_expected, timeout=120)
    in_partition = await results_by_partition(redis, keys, partitions)
    got = [r for _, r in in_partition]
    counts = Counter(r.id for r in got)
    by_id = {r.id: r for r in got}
    duplicated = [k for k, n in counts.items() if n > 1]
    want = {wf.id for wf, _ in plans} | {f"{wf.id}::{s}" for wf, exp in plans for s, st in exp.items() if st != "skipped"}
    lost = want - set(counts)
    extra = set(counts) - want
    attempts = Counter(r.attempts for r in got if r.agent == "echo")
    with capsys.disabled():
        print(f"\nworkflow chaos: {WORKFLOWS} workflows in {partitions} partition(s), {steps_expected} steps run, {kills} SIGKILLs, {len(got)} results, "
              f"{len(lost)} lost, {len(duplicated)} duplicated, {len(extra)} unexpected, step attempts {dict(sorted(attempts.items()))}, "
              f"{time.monotonic() - t0:.1f}s")
    # Then every workflow and every step that runs yields exactly one result event
    assert not lost, sorted(lost)[:10]
    assert not duplicated, duplicated[:10]
    assert not extra, sorted(extra)[:10]
    # and statuses are what each graph dictates
    for wf, expected in plans:
        event = by_id[wf.id]
        assert wf.id is not None
        assert {s: v["status"] for s, v in event.result["steps"].items()} == expected, wf.id
        assert event.status == ("completed" if all(st == "completed" for st in expected.values()) else "failed"), wf.id
        for sid, st in expected.items():
            if st != "skipped":
                assert by_id[f"{wf.id}::{sid}"].status == st, f"{wf.id}::{sid}"
    # and each step's result event is in its workflow's partition
    assert [(r.id, p) for p, r in in_partition if p != partition_of(r.parent or r.id, partitions)] == []
    assert kills >= 6
    assert max(attempts) > 1
