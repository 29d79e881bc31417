"""``streamcrew demo``: the whole pipeline on an embedded Redis, with a report a newcomer can check."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from consumers.processes import Child, streamcrew_cmd
from streams.config import StreamSettings
from streams.connection import connect
from streams.embedded import embedded_redis
from streams.envelope import JobRequest, JobResult
from streams.keys import Keys
from streams.producer import Producer

err = Console(stderr=True)


@dataclass
class DemoOptions:
    requests: int = 2000
    workers: int = 2
    concurrency: int = 200
    as_json: bool = False


@dataclass
class DemoReport:
    requests: int
    results: int
    lost: int
    duplicated: int
    seconds: float
    throughput_per_s: float
    statuses: dict[str, int]
    queue_wait_ms: dict[str, float]
    run_ms: dict[str, float]
    redis: str
    samples: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.duplicated == 0 and self.results == self.requests


def _percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": 0.0, "p95": 0.0, "p99": 0.0}
    qs = statistics.quantiles(values, n=100, method="inclusive") if len(values) > 1 else [values[0]] * 99
    return {"p50": round(qs[49], 1), "p95": round(qs[94], 1), "p99": round(qs[98], 1)}


def _requests(n: int) -> list[tuple[str, JobRequest]]:
    rng = random.Random(7)
    out = []
    for i in range(n):
        lane = "high" if rng.random() < 0.1 else "normal"
        data: dict[str, Any] = {"order_id": f"ORD-{10000 + i}", "sleep_s": round(rng.uniform(0.01, 0.1), 3)}
        if i % 50 == 7:
            data["fail_first"] = 1
        out.append((lane, JobRequest(agent="echo", data=data, id=f"demo-{i}")))
    return out


async def _play(url: str, prefix: str, options: DemoOptions, log_dir: Path) -> DemoReport:
    keys = Keys(prefix)
    redis = connect(url)
    env = {"STREAMCREW_REDIS_URL": url, "STREAMCREW_PREFIX": prefix, "STREAMCREW_METRICS_PORT": "0", "STREAMCREW_RETRY_BACKOFF_S": "0.2"}
    children = [Child(streamcrew_cmd("worker", "--concurrency", str(options.concurrency), "--log-level", "warning"), env=env,
                      log_path=log_dir / f"worker-{i}.log") for i in range(options.workers)]
    try:
        producer = Producer(redis, keys)
        t0 = time.monotonic()
        by_lane: dict[str, list[JobRequest]] = {}
        for lane, request in _requests(options.requests):
            by_lane.setdefault(lane, []).append(request)
        for lane, batch in by_lane.items():
            await producer.publish_many(batch, priority=lane)
        deadline = time.monotonic() + 120
        while (have := int(await redis.xlen(keys.results))) < options.requests and time.monotonic() < deadline:
            if not any(c.alive() for c in children):
                raise RuntimeError("every worker exited:\n" + children[0].log_text()[-2000:])
            if not options.as_json and sys.stderr.isatty():
                err.print(f"\r{have}/{options.requests} results", end="")
            await asyncio.sleep(0.1)
        seconds = time.monotonic() - t0
        results = [JobResult.from_fields(f) for _, f in await redis.xrange(keys.results)]
    finally:
        for c in children:
            c.stop()
        await redis.aclose()
    counts = Counter(r.id for r in results)
    expected = {f"demo-{i}" for i in range(options.requests)}
    waits = [(r.started_at - r.submitted_at) for r in results if r.started_at and r.submitted_at]
    runs = [(r.finished_at - r.started_at) for r in results if r.finished_at and r.started_at]
    return DemoReport(
        requests=options.requests, results=len(results), lost=len(expected - set(counts)),
        duplicated=sum(n - 1 for n in counts.values() if n > 1), seconds=round(seconds, 2),
        throughput_per_s=round(len(results) / seconds, 1) if seconds else 0.0,
        statuses=dict(Counter(str(r.status) for r in results)), queue_wait_ms=_percentiles(waits), run_ms=_percentiles(runs),
        redis=url, samples=[r.to_json_dict() for r in results[:3]],
    )


async def run_demo(settings: StreamSettings, options: DemoOptions) -> DemoReport:
    """Start Redis (embedded unless configured), workers, play the requests, print the report."""
    prefix = settings.prefix if settings.redis_url else "streamcrew"
    with tempfile.TemporaryDirectory(prefix="streamcrew-demo-") as tmp, contextlib.ExitStack() as stack:
        if settings.redis_url:
            url = settings.redis_url
            prefix = f"{settings.prefix}-demo-{os.getpid()}"
        else:
            server = stack.enter_context(embedded_redis())
            url = server.url
            err.print(f"embedded Redis ({server.binary}) at {url}")
        report = await _play(url, prefix, options, Path(tmp))
    if options.as_json:
        print(json.dumps(asdict(report) | {"ok": report.ok}))
    else:
        _print(report)
    return report


def _print(report: DemoReport) -> None:
    out = Console()
    out.print(f"\n[bold]{report.requests} requests in → {report.results} results out, {report.lost} lost, {report.duplicated} duplicated[/bold]")
    out.print(f"{report.seconds}s, {report.throughput_per_s}/s; statuses {report.statuses}")
    out.print(f"queue wait ms {report.queue_wait_ms}; run ms {report.run_ms}")
    for sample in report.samples:
        out.print(json.dumps(sample))
