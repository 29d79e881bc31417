"""Workflows: step throughput against plain no-op jobs, and the fan-in's latency, through one worker.

Run: ``python -m bench.bench_workflows`` (``--workflows N``, ``--concurrency C``, ``--redis-url URL``).
It starts its own redis-server unless given a URL, and in the same run measures:

- the core: ``10 x N`` no-op ``echo`` jobs through one ``streamcrew worker`` (jobs/s),
- ``N`` workflows of 10 no-op ``echo`` steps through one worker: 8 independent steps (fan-out 8), then two
  steps that each run after all eight (fan-in 2); step results/s and the ratio to the core,
- fan-in latency per workflow: from its last step's result event to its workflow result event on the results
  stream (entry ID times). The fan-in runs inside the last step's settle, in the same Lua call, so this is 0
  by construction; the bench checks it.
- end to end per workflow: from the moment its last step's agent returned (worker clock) to the workflow
  result being visible, next to the same figure of plain jobs (agent returned -> result visible): the
  settle batch's wait, which every job pays.

Rounds alternate core and workflows (``--rounds``), so a machine whose load changes affects both alike;
each round's ratio is printed, and the median.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path

import redis as sync_redis

from bench.common import bench_redis, cpu_seconds, new_prefix, start_worker, wait_count
from streams.connection import connect
from streams.envelope import JobRequest, now_ms
from streams.keys import Keys
from streams.producer import Producer
from streams.workflow import WORKFLOW_AGENT, Workflow

STEPS = 10


def graph(i: int) -> Workflow:
    wf = Workflow(f"wf-{i}")
    fan = [wf.step(f"part{k}", "echo", {"k": k}) for k in range(8)]
    wf.step("join_a", "echo", {}, after=fan)
    wf.step("join_b", "echo", {}, after=fan)
    return wf


async def publish(url: str, prefix: str, requests: list[JobRequest]) -> None:
    redis = connect(url)
    await Producer(redis, Keys(prefix)).publish_many(requests)
    await redis.aclose()


def run(url: str, prefix: str, total: int, concurrency: int, log_dir: Path) -> tuple[float, float, float]:
    """Start one worker on already published work; returns (first result time, last result time, worker CPU s)."""
    client = sync_redis.Redis.from_url(url)
    results = Keys(prefix).results
    child = start_worker(url, prefix, "--concurrency", str(concurrency), log_dir=log_dir)
    try:
        t0 = wait_count(client, results, 1, timeout=120, child=child)
        cpu0 = cpu_seconds(child.pid)
        t1 = wait_count(client, results, total, timeout=600, child=child)
        cpu = cpu_seconds(child.pid) - cpu0
    finally:
        child.stop()
        client.close()
    return t0, t1, cpu


def entry_ms(eid: str) -> int:
    return int(eid.split("-")[0])


ADJACENT: list[int] = [0, 0]  # workflow results right after their last step's result (same Lua call), of all


def latencies_ms(url: str, prefix: str) -> tuple[list[float], list[float]]:
    """Per workflow: (last step's result -> workflow result, last step's agent returned -> workflow result);
    for plain jobs the second list holds agent returned -> result visible."""
    client = sync_redis.Redis.from_url(url, decode_responses=True)
    last_event: dict[str, int] = {}
    last_finish: dict[str, int] = {}
    visible: dict[str, int] = {}
    plain: list[float] = []
    previous = ""
    for eid, f in client.xrange(Keys(prefix).results):
        if parent := f.get("parent"):
            last_event[parent] = max(last_event.get(parent, 0), entry_ms(eid))
            last_finish[parent] = max(last_finish.get(parent, 0), int(f["finished_at"]))
            previous = parent
        elif f["agent"] == WORKFLOW_AGENT:
            visible[f["id"]] = entry_ms(eid)
            ADJACENT[0] += previous == f["id"]
            ADJACENT[1] += 1
            previous = ""
        else:
            plain.append(float(entry_ms(eid) - int(f["finished_at"])))
    client.close()
    if not visible:
        return [], plain
    fan_in = [float(visible[w] - last_event[w]) for w in visible]
    return fan_in, [float(visible[w] - last_finish[w]) for w in visible]


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def core_round(url: str, n_jobs: int, concurrency: int, log_dir: Path) -> tuple[float, float, list[float]]:
    """Returns (jobs/s, worker CPU µs per job, agent returned -> result visible ms)."""
    prefix = new_prefix("wf-core")
    asyncio.run(publish(url, prefix, [JobRequest(agent="echo", data={"i": i}) for i in range(n_jobs)]))
    t0, t1, cpu = run(url, prefix, n_jobs, concurrency, log_dir)
    return (n_jobs - 1) / (t1 - t0), cpu / (n_jobs - 1) * 1e6, latencies_ms(url, prefix)[1]


def workflow_round(url: str, workflows: int, concurrency: int, log_dir: Path) -> tuple[float, float, list[float], list[float]]:
    """Returns (steps/s, worker CPU µs per step, fan-in ms, last agent returned -> workflow result visible ms)."""
    prefix = new_prefix("wf")
    stamp = now_ms()
    requests = [JobRequest(agent=WORKFLOW_AGENT, data=graph(i).to_data(), id=f"wf-{i}", submitted_at=stamp) for i in range(workflows)]
    asyncio.run(publish(url, prefix, requests))
    t0, t1, cpu = run(url, prefix, workflows * (STEPS + 1), concurrency, log_dir)
    fan_in, end_to_end = latencies_ms(url, prefix)
    steps = workflows * STEPS - 1
    return steps / (t1 - t0), cpu / steps * 1e6, fan_in, end_to_end


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workflows", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--redis-url")
    args = parser.parse_args()
    n_jobs = args.workflows * STEPS
    if n_jobs < 10 * args.concurrency:  # rates run from the first result to the last: a few batches say nothing
        print(f"warning: {n_jobs:,} jobs for {args.concurrency:,} slots; rates need at least 10x the slots "
              f"(--workflows {-(-10 * args.concurrency // STEPS):,} or fewer --concurrency)", file=sys.stderr)
    ratios: list[float] = []
    fan_in: list[float] = []
    wf_e2e: list[float] = []
    job_e2e: list[float] = []
    with bench_redis(args.redis_url) as url, tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            core_rate, core_cpu, core_lat = core_round(url, n_jobs, args.concurrency, Path(tmp))
            step_rate, step_cpu, fi, e2e = workflow_round(url, args.workflows, args.concurrency, Path(tmp))
            ratios.append(step_rate / core_rate)
            fan_in += fi
            wf_e2e += e2e
            job_e2e += core_lat
            print(f"round {r + 1}: core {core_rate:7,.0f} jobs/s {core_cpu:5.0f} µs CPU/job ({n_jobs:,} no-op echo jobs)   "
                  f"workflow steps {step_rate:7,.0f} steps/s {step_cpu:5.0f} µs CPU/step ({args.workflows:,} workflows x {STEPS})   "
                  f"ratio {step_rate / core_rate:.2f}", flush=True)
    print(f"ratio steps / core, median of {args.rounds} rounds: {statistics.median(ratios):.2f}   (target >= 0.50; one worker, concurrency {args.concurrency})")
    print(f"fan-in latency (last step's result -> workflow result): p50 {statistics.median(fan_in):.1f} ms, "
          f"p99 {pct(fan_in, 99):.1f} ms, max {max(fan_in):.1f} ms   (target p99 < 5 ms); {ADJACENT[0]:,} of {ADJACENT[1]:,} "
          f"workflow results directly follow their last step's result (written by the same Lua call)")
    print(f"agent returned -> result visible: workflows p50 {statistics.median(wf_e2e):.0f} ms p99 {pct(wf_e2e, 99):.0f} ms; "
          f"plain jobs p50 {statistics.median(job_e2e):.0f} ms p99 {pct(job_e2e, 99):.0f} ms (the settle batch's wait)")


if __name__ == "__main__":
    main()
