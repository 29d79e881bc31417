"""LLM agents on one worker process against ``streamcrew mock-llm`` in its own process.

Run: ``python -m bench.bench_llm`` (``--jobs``, ``--crew-jobs``, ``--redis-url``, ``--profile DIR``). It
starts a private redis-server unless given a URL, and measures, in one run:

a. ``ask`` (one chat completion per job): ``--jobs`` (10,000) jobs against mock-llm
   ``--latency 1`` on ONE worker with ``--concurrency`` (10,000). Measured as bench_core's
   I/O run: publish first, start the worker, time from the first result minus the latency to
   the last result. Ideal = ceil(jobs / concurrency) x latency: each job is one round trip of
   ``latency`` and ``concurrency`` of them overlap, so 10,000 at 10,000 ideally take 1 s; the
   rest is the worker's (and the mock's) CPU. Target <= 12 s.
b. crew jobs per second of one worker (``order``, then ``support``) against mock-llm
   ``--latency 0.2``, measured from the first result to the last (the steady state, CrewAI's
   one-off warm-up excluded). Ideal = concurrency / (LLM calls per job x latency): the rate if
   only the mock's latency counted. Target >= 20 jobs/s.

The per-key in-flight cap (``STREAMCREW_LLM_MAX_CONCURRENCY``, default 1024 per key) is raised
to the worker's concurrency: the point is the worker, not a provider's quota. ``--profile DIR``
attaches py-spy to the worker during each run and writes raw (collapsed) stacks there.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import redis as sync_redis

from bench.common import bench_redis, cpu_seconds, new_prefix, wait_count
from consumers.processes import Child, streamcrew_cmd
from streams.connection import connect
from streams.embedded import free_port
from streams.envelope import JobRequest
from streams.keys import Keys
from streams.producer import Producer

KEYS = "bench-key-1,bench-key-2"
CALLS = {"ask": 1, "order": 2, "support": 3}  # mock-llm: a tool call, then an answer; support routes first
INPUTS = {
    "order": lambda i: {"order_id": ("ORD-12345", "ORD-12346", "ORD-12347", "ORD-12348")[i % 4], "question": f"Where is my package? ({i})"},
    "support": lambda i: {"query": f"Where is my parcel for order ORD-1234{5 + i % 4}? ({i})", "customer_id": f"CUS-{i % 50:03d}"},
    "ask": lambda i: {"prompt": f"Say hello to customer {i}"},
}


@dataclass
class Row:
    name: str
    jobs: int
    concurrency: int
    latency_s: float
    seconds: float
    rate: float
    ideal: str
    ratio: float
    target: str
    ok: bool
    worker_cpu_us: float
    mock_cpu_us: float


@contextmanager
def mock_llm(latency_s: float, log_dir: Path) -> Iterator[tuple[str, Child]]:
    """``streamcrew mock-llm`` in its own process on a free port; yields (OpenAI base URL, child)."""
    port = free_port()
    child = Child(streamcrew_cmd("mock-llm", "--port", str(port), "--latency", str(latency_s)), log_path=log_dir / f"mock-{port}.log")
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if not child.alive() or time.monotonic() > deadline:
                raise SystemExit(f"mock-llm did not start:\n{child.log_text()[-2000:]}")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/v1", child
    finally:
        child.stop()


@contextmanager
def profiled(pid: int, out: Path | None) -> Iterator[None]:
    """py-spy on ``pid`` while the block runs (raw collapsed stacks), when ``out`` is given."""
    if out is None:
        yield
        return
    spy = subprocess.Popen(["py-spy", "record", "--pid", str(pid), "-o", str(out), "-f", "raw", "--rate", "200", "--gil", "--nonblocking"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)
        try:
            spy.wait(30)
        except subprocess.TimeoutExpired:
            spy.kill()
            spy.wait(5)


def wait_claimed(client: sync_redis.Redis, lane: str, child: Child) -> float:
    """Wait for the worker's first claim (its start-up, CrewAI's import included, is not the jobs' cost); its CPU seconds then."""
    deadline = time.monotonic() + 120
    while int(client.xpending(lane, "workers")["pending"]) == 0:
        if not child.alive() or time.monotonic() > deadline:
            raise SystemExit(f"the worker claimed nothing:\n{child.log_text()[-2000:]}")
        time.sleep(0.005)
    return cpu_seconds(child.pid)


async def publish(url: str, prefix: str, agent: str, n: int) -> None:
    redis = connect(url)
    producer = Producer(redis, Keys(prefix))
    await producer.publish_many([JobRequest(agent=agent, data=INPUTS[agent](i)) for i in range(n)])
    await redis.aclose()


def run(url: str, agent: str, n: int, concurrency: int, latency_s: float, log_dir: Path, profile: Path | None,
        worker_args: list[str]) -> Row:
    """One worker, ``n`` jobs of ``agent`` published before it starts; the mock in its own process."""
    prefix = new_prefix(agent)
    asyncio.run(publish(url, prefix, agent, n))
    client = sync_redis.Redis.from_url(url)
    results = Keys(prefix).results
    with mock_llm(latency_s, log_dir) as (base_url, mock):
        env = {"STREAMCREW_REDIS_URL": url, "STREAMCREW_PREFIX": prefix, "STREAMCREW_METRICS_PORT": "0",
               "STREAMCREW_LLM_MAX_CONCURRENCY": str(concurrency)}
        child = Child(streamcrew_cmd("worker", "--agents", agent, "--concurrency", str(concurrency),
                                     "--llm-base-url", base_url, "--llm-api-keys", KEYS, *worker_args), env=env, log_path=log_dir / f"{prefix}.log")
        try:
            with profiled(child.pid, profile / f"{agent}.txt" if profile else None):
                cpu0, mcpu0 = wait_claimed(client, Keys(prefix).lane("normal"), child), cpu_seconds(mock.pid)
                t_first = wait_count(client, results, 1, timeout=120, child=child)
                c0 = int(client.xlen(results))
                t1 = wait_count(client, results, n, timeout=600, child=child)
                cpu1, mcpu1 = cpu_seconds(child.pid), cpu_seconds(mock.pid)
            statuses = {f[b"status"] for _, f in client.xrange(results)}
            if statuses != {b"completed"}:
                raise SystemExit(f"{agent}: results not all completed: {statuses}:\n{child.log_text()[-2000:]}")
        finally:
            child.stop()
            client.close()
    worker_us, mock_us = (cpu1 - cpu0) / n * 1e6, (mcpu1 - mcpu0) / n * 1e6
    if agent == "ask":  # latency-bound: the whole run, from the first job's start
        seconds = t1 - (t_first - latency_s)
        ideal = math.ceil(n / concurrency) * latency_s
        return Row(agent, n, concurrency, latency_s, seconds, n / seconds, f"{ideal:.0f} s", seconds / ideal, "<= 12 s",
                   seconds <= 12, worker_us, mock_us)
    seconds = t1 - t_first
    rate = (n - c0) / seconds if seconds > 0 else float("inf")
    ideal_rate = concurrency / (CALLS[agent] * latency_s)
    return Row(agent, n, concurrency, latency_s, seconds, rate, f"{ideal_rate:.0f}/s", rate / ideal_rate, ">= 20/s",
               rate >= 20, worker_us, mock_us)


def print_table(rows: list[Row]) -> None:
    print(f"{'run':<8} {'jobs':>6} {'conc':>6} {'lat s':>5} {'seconds':>8} {'jobs/s':>8} {'ideal':>7} {'ratio':>6} "
          f"{'target':>8} {'ok':>3} {'wkr µs/job':>10} {'mock µs/job':>11}")
    for r in rows:
        print(f"{r.name:<8} {r.jobs:>6} {r.concurrency:>6} {r.latency_s:>5g} {r.seconds:>8.2f} {r.rate:>8.1f} {r.ideal:>7} "
              f"{r.ratio:>6.2f} {r.target:>8} {'yes' if r.ok else 'NO':>3} {r.worker_cpu_us:>10.0f} {r.mock_cpu_us:>11.0f}")
    print("ratio: ask = seconds / ideal seconds (1.00 is perfect); crews = jobs/s / ideal jobs/s (1.00 is perfect)")
    print("µs/job: CPU of the worker and of mock-llm from the worker's first claim to the last result, over all jobs")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=10_000, help="ask jobs in run (a)")
    parser.add_argument("--concurrency", type=int, default=10_000, help="worker concurrency in run (a)")
    parser.add_argument("--latency", type=float, default=1.0, help="mock-llm latency in run (a)")
    parser.add_argument("--crew-jobs", type=int, default=600, help="jobs per crew run in (b)")
    parser.add_argument("--crew-concurrency", type=int, default=100, help="worker concurrency in (b)")
    parser.add_argument("--crew-latency", type=float, default=0.2, help="mock-llm latency in (b)")
    parser.add_argument("--crews", default="order,support", help="crew agents for (b), comma-separated")
    parser.add_argument("--skip-ask", action="store_true")
    parser.add_argument("--skip-crews", action="store_true")
    parser.add_argument("--redis-url")
    parser.add_argument("--profile", type=Path, help="directory for py-spy raw profiles of the worker")
    parser.add_argument("--worker-arg", action="append", default=[], help="extra worker argument (repeatable), e.g. --worker-arg=--app --worker-arg=mymod")
    args = parser.parse_args()
    if not args.skip_crews and args.crew_jobs < 3 * args.crew_concurrency:  # crews: first result to last, the steady state
        print(f"warning: --crew-jobs {args.crew_jobs:,} for {args.crew_concurrency:,} slots: a rate from the first result to "
              "the last needs at least 3x the slots", file=sys.stderr)
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    rows: list[Row] = []
    started = time.monotonic()
    with bench_redis(args.redis_url) as url, tempfile.TemporaryDirectory() as tmp:
        if not args.skip_ask:
            rows.append(run(url, "ask", args.jobs, args.concurrency, args.latency, Path(tmp), args.profile, args.worker_arg))
        if not args.skip_crews:
            for agent in [a.strip() for a in args.crews.split(",") if a.strip()]:
                rows.append(run(url, agent, args.crew_jobs, args.crew_concurrency, args.crew_latency, Path(tmp), args.profile, args.worker_arg))
    print_table(rows)
    print(f"(bench wall time {time.monotonic() - started:.0f} s; one worker process each, mock-llm and Redis in their own processes, "
          f"{os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
