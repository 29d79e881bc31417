"""Core throughput: one worker process on no-op ``echo`` jobs vs a raw redis-py loop doing the same Redis work.

Run: ``python -m bench.bench_core`` (add ``--jobs N``, ``--rounds N``, ``--redis-url URL``). It starts
its own redis-server unless given a URL, and prints:

- batched publish rate (Producer.publish_many),
- end-to-end jobs/s of one ``streamcrew worker`` (XADD → worker → result + job record + XACK),
- the same Redis work done by a minimal raw redis-py loop, measured in the same run, and the ratio,
- the worker's CPU microseconds per job (the worker runs at the default log level),
- an I/O-bound run: 10,000 ``echo`` jobs with ``sleep_s=1`` at ``--concurrency 1000`` vs the ideal 10 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

import redis as sync_redis

from bench.common import bench_redis, cpu_seconds, new_prefix, start_worker, wait_count
from streams.connection import connect
from streams.envelope import JobRequest
from streams.keys import Keys
from streams.producer import Producer


def raw_loop(url: str, n: int) -> float:
    """The baseline: pipelined XADD; XREADGROUP COUNT 500; per entry result XADD + record HSET + XACK, pipelined."""
    r = sync_redis.Redis.from_url(url, decode_responses=True, socket_timeout=30)
    p = new_prefix("raw")
    lane, results = f"{p}:requests:normal", f"{p}:results"
    r.xgroup_create(lane, "workers", id="0", mkstream=True)
    pipe = r.pipeline(transaction=False)
    for i in range(n):
        pipe.xadd(lane, {"agent": "echo", "data": json.dumps({"i": i})})
        if i % 1000 == 999:
            pipe.execute()
    pipe.execute()
    t0 = time.perf_counter()
    done = 0
    while done < n:
        reply = r.xreadgroup("workers", "raw", {lane: ">"}, count=500)
        if not reply:
            continue
        pipe = r.pipeline(transaction=False)
        for eid, fields in reply[0][1]:
            now = str(int(time.time() * 1000))
            result = json.dumps({"echo": json.loads(fields["data"])})
            pipe.xadd(results, {"id": eid, "agent": "echo", "status": "completed", "result": result, "attempts": "1", "finished_at": now})
            pipe.hset(f"{p}:job:{eid}", mapping={"status": "completed", "result": result, "finished_at": now})
            pipe.xack(lane, "workers", eid)
            done += 1
        pipe.execute()
    rate = n / (time.perf_counter() - t0)
    r.close()
    return rate


async def publish(url: str, prefix: str, n: int, data: dict[str, object]) -> float:
    redis = connect(url)
    producer = Producer(redis, Keys(prefix))
    await producer.ensure_groups()
    requests = [JobRequest(agent="echo", data={**data, "i": i}) for i in range(n)]
    t0 = time.perf_counter()
    await producer.publish_many(requests)
    rate = n / (time.perf_counter() - t0)
    await redis.aclose()
    return rate


def worker_run(url: str, n: int, concurrency: int, log_dir: Path) -> tuple[float, float, float]:
    """Returns (publish jobs/s, worker jobs/s, worker CPU µs/job)."""
    prefix = new_prefix("worker")
    pub_rate = asyncio.run(publish(url, prefix, n, {}))
    client = sync_redis.Redis.from_url(url)
    results = Keys(prefix).results
    child = start_worker(url, prefix, "--concurrency", str(concurrency), log_dir=log_dir)
    try:
        wait_count(client, results, 1, timeout=60, child=child)
        t0, cpu0, c0 = time.monotonic(), cpu_seconds(child.pid), int(client.xlen(results))
        t1 = wait_count(client, results, n, timeout=300, child=child)
        cpu1 = cpu_seconds(child.pid)
    finally:
        child.stop()
        client.close()
    done = n - c0
    return pub_rate, done / (t1 - t0), (cpu1 - cpu0) / done * 1e6


def io_run(url: str, n: int, sleep_s: float, concurrency: int, log_dir: Path) -> float:
    """Seconds for ``n`` jobs of ``sleep_s`` at ``concurrency`` on one worker, publish excluded."""
    prefix = new_prefix("io")
    asyncio.run(publish(url, prefix, n, {"sleep_s": sleep_s}))
    client = sync_redis.Redis.from_url(url)
    child = start_worker(url, prefix, "--concurrency", str(concurrency), log_dir=log_dir)
    try:
        wait_count(client, Keys(prefix).results, 1, timeout=60, child=child)
        t0 = time.monotonic() - sleep_s  # the first result lands one sleep after the start
        t1 = wait_count(client, Keys(prefix).results, n, timeout=300, child=child)
    finally:
        child.stop()
        client.close()
    return t1 - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--concurrency", type=int, default=1000)
    parser.add_argument("--io-jobs", type=int, default=10_000)
    parser.add_argument("--redis-url")
    parser.add_argument("--skip-io", action="store_true")
    parser.add_argument("--rounds", type=int, default=3, help="raw loop and worker alternate this many times; the best of each counts")
    args = parser.parse_args()
    with bench_redis(args.redis_url) as url, tempfile.TemporaryDirectory() as tmp:
        # Alternating the two and keeping the best of each makes the ratio robust to other load on the machine.
        raws: list[float] = []
        runs: list[tuple[float, float, float]] = []
        for _ in range(max(1, args.rounds)):
            raws.append(raw_loop(url, args.jobs))
            runs.append(worker_run(url, args.jobs, args.concurrency, Path(tmp)))
        raw = max(raws)
        pub = max(r[0] for r in runs)
        rate = max(r[1] for r in runs)
        cpu_us = min(r[2] for r in runs)
        print(f"rounds               {len(raws):10d}          (worker at the default log level; best of each)")
        print(f"batched publish      {pub:10,.0f} jobs/s   (target >= 40,000)")
        print(f"raw redis-py loop    {raw:10,.0f} jobs/s   (same Redis work, same run; each round: {', '.join(f'{r:,.0f}' for r in raws)})")
        print(f"streamcrew worker    {rate:10,.0f} jobs/s   (target >= 12,000; each round: {', '.join(f'{r[1]:,.0f}' for r in runs)})")
        print(f"ratio worker / raw   {rate / raw:10.2f}          (target >= 0.50)")
        print(f"worker CPU per job   {cpu_us:10.1f} µs      (target <= 80)")
        if not args.skip_io:
            ideal = args.io_jobs / args.concurrency * 1.0
            seconds = io_run(url, args.io_jobs, 1.0, args.concurrency, Path(tmp))
            print(f"I/O-bound {args.io_jobs:,} x 1 s at concurrency {args.concurrency}: {seconds:.1f} s "
                  f"(ideal {ideal:.0f} s, ratio to ideal {seconds / ideal:.2f}, target <= 12 s)")


if __name__ == "__main__":
    main()
