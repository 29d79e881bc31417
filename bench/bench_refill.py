"""Jobs that end one at a time: Redis calls and CPU per job with the refill wait, against claiming at once.

    .venv/bin/python -m bench.bench_refill [--jobs 3000] [--sleep 0.2] [--partitions 1,6] [--rounds 2]

No-op jobs started together end together, so one read and one settle serve a whole batch (bench_core,
bench_cluster). LLM calls end at spread-out times: a full pool then frees one slot at a time, and each job
can cost a read (per lane and partition down to the one with work), a start and a settle of its own. Here
one worker (default settings, 100 slots) runs ``--jobs`` echo jobs sleeping uniformly between half and 1.5x
``--sleep`` seconds, once with ``STREAMCREW_REFILL_WAIT_MS=0`` (the baseline: claim as soon as a slot frees)
and once with the default wait, alternating, on a private redis-server. Prints per side the Redis CPU per
job (``INFO cpu``), XREADGROUP and EVALSHA calls per job (``INFO commandstats``) and jobs/s, and the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from pathlib import Path

import redis as sync_redis

from bench.common import bench_redis, new_prefix
from consumers.processes import Child, streamcrew_cmd
from consumers.settings import WorkerSettings
from streams.connection import connect_detected
from streams.envelope import JobRequest
from streams.keys import Keys, partition_keys
from streams.producer import Producer
from tests.support import wait_for_log

DEFAULT_WAIT_MS = WorkerSettings.model_fields["refill_wait_ms"].default


async def publish(url: str, prefix: str, n: int, sleep_s: float, partitions: int) -> None:
    redis = await connect_detected(url)
    rng = random.Random(7)  # the same job times on both sides
    jobs = [JobRequest(agent="echo", data={"sleep_s": round(rng.uniform(sleep_s / 2, sleep_s * 1.5), 3)}) for _ in range(n)]
    await Producer(redis, Keys(prefix), partitions=partitions).publish_many(jobs)
    await redis.aclose()


def run_side(url: str, n: int, sleep_s: float, partitions: int, wait_ms: int, log_dir: Path) -> dict[str, float]:
    """One worker runs the jobs; Redis CPU µs, reads and script calls per job, and jobs/s."""
    prefix = new_prefix(f"refill{wait_ms}")
    env = {"STREAMCREW_REDIS_URL": url, "STREAMCREW_PREFIX": prefix, "STREAMCREW_METRICS_PORT": "0",
           "STREAMCREW_PARTITIONS": str(partitions), "STREAMCREW_REFILL_WAIT_MS": str(wait_ms)}
    child = Child(streamcrew_cmd("worker"), env=env, log_path=log_dir / f"{prefix}.log")
    client = sync_redis.Redis.from_url(url)
    results = [k.results for k in partition_keys(Keys(prefix), partitions)]
    try:
        wait_for_log(child, " ready: ")
        client.config_resetstat()
        cpu0 = client.info("cpu")
        asyncio.run(publish(url, prefix, n, sleep_s, partitions))
        t0 = time.monotonic()
        deadline = t0 + 600
        while sum(int(client.xlen(k)) for k in results) < n:
            if not child.alive():
                raise SystemExit(f"worker died:\n{child.log_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out waiting for {n} results")
            time.sleep(0.1)
        elapsed = time.monotonic() - t0
        cpu1, calls = client.info("cpu"), client.info("commandstats")
    finally:
        child.stop()
        client.close()
    cpu = sum(float(cpu1[k]) - float(cpu0[k]) for k in ("used_cpu_user", "used_cpu_sys"))
    return {"cpu_us": cpu / n * 1e6, "reads": calls.get("cmdstat_xreadgroup", {}).get("calls", 0) / n,
            "scripts": calls.get("cmdstat_evalsha", {}).get("calls", 0) / n, "rate": n / elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--sleep", type=float, default=0.2, help="mean job time in seconds (uniform, 0.5x - 1.5x)")
    parser.add_argument("--partitions", default="1,6", help="comma-separated STREAMCREW_PARTITIONS values to run")
    parser.add_argument("--rounds", type=int, default=2, help="baseline and default alternated; medians are printed")
    parser.add_argument("--redis-url", default=None, help="an empty Redis to use (default: a private redis-server)")
    args = parser.parse_args()
    with bench_redis(args.redis_url) as url, tempfile.TemporaryDirectory() as tmp:
        for partitions in (int(p) for p in args.partitions.split(",")):
            sides: dict[int, list[dict[str, float]]] = {0: [], DEFAULT_WAIT_MS: []}
            for _ in range(args.rounds):
                for wait_ms in sides:
                    sides[wait_ms].append(run_side(url, args.jobs, args.sleep, partitions, wait_ms, Path(tmp)))
            med = {w: {k: statistics.median(r[k] for r in runs) for k in runs[0]} for w, runs in sides.items()}
            base, new = med[0], med[DEFAULT_WAIT_MS]
            print(f"{partitions} partition(s), {args.jobs:,} jobs of {args.sleep / 2:g} - {args.sleep * 1.5:g} s, "
                  f"one worker (100 slots), median of {args.rounds} rounds:")
            for label, side in (("REFILL_WAIT_MS=0 (baseline)", base), (f"REFILL_WAIT_MS={DEFAULT_WAIT_MS} (default)", new)):
                print(f"  {label:30s} Redis CPU {side['cpu_us']:6.1f} µs/job  XREADGROUP {side['reads']:5.2f}/job  "
                      f"EVALSHA {side['scripts']:5.2f}/job  {side['rate']:6.0f} jobs/s")
            print(f"  default / baseline: Redis CPU per job {new['cpu_us'] / base['cpu_us']:.2f}, "
                  f"jobs/s {new['rate'] / base['rate']:.2f}")


if __name__ == "__main__":
    main()
