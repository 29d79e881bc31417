"""Orchestration of ``streamcrew demo``: Redis, workers, notifier, gateway, receiver, traffic, chaos, report."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import secrets
import tempfile
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
from redis.asyncio import Redis
from rich.console import Console
from rich.live import Live

from consumers.demo.cleanup import INTERRUPTING, delete_prefix, interrupted_by
from consumers.demo.receiver import Receiver
from consumers.demo.tally import Tally, percentiles
from consumers.demo.traffic import Malformed, Planned, plan
from consumers.demo.view import live_view, print_curl, print_report
from consumers.processes import Child, streamcrew_cmd
from streams.config import StreamSettings
from streams.connection import connect_detected
from streams.embedded import embedded_redis, free_port
from streams.envelope import JobRequest
from streams.keys import Keys, keys_for_job
from streams.producer import Producer
from streams.urls import loggable_url

RESULTS_TIMEOUT_S = 180.0
WEBHOOKS_TIMEOUT_S = 30.0
POLL_S = 0.25
STOP_GRACE_S = 10.0


@dataclass
class DemoOptions:
    requests: int = 2000
    rate: float = 500.0
    workers: int = 2
    concurrency: int = 32
    chaos: bool = True
    serve: bool = False
    as_json: bool = False
    keep: bool = False  # leave the demo's keys in an outside Redis
    use_llm: bool = False  # let the workers call the configured LLM endpoint
    llm_endpoint: str | None = None  # that endpoint (STREAMCREW_LLM_BASE_URL) as it may be shown, or None

    @property
    def llm_line(self) -> str:
        """Which model the demo's agents reach, in the words of its stderr line and its report."""
        if self.llm_endpoint is None:
            return "offline model (no STREAMCREW_LLM_BASE_URL)"
        if self.use_llm:
            return f"{self.llm_endpoint} (STREAMCREW_LLM_BASE_URL, --use-llm)"
        return f"offline model (STREAMCREW_LLM_BASE_URL {self.llm_endpoint} not called without --use-llm)"


def _catalogue_ids() -> tuple[list[str], list[str]]:
    """Order and product ids from the demo catalogue, plus a few that do not exist."""
    data = json.loads(resources.files("agents").joinpath("data/catalogue.json").read_text(encoding="utf-8"))
    orders = [o["order_id"] for o in data["orders"]]
    products = [p["sku"] for p in data["products"]]
    return orders + ["ORD-99999"], products + ["SKU-9999"]


class Demo:
    """The demo's processes and traffic over ``redis`` (one Redis or a cluster), with ``partitions`` partitions."""

    def __init__(self, url: str, redis: Redis, prefix: str, partitions: int, options: DemoOptions, log_dir: Path) -> None:
        self.url, self.prefix, self.options, self.log_dir = url, prefix, options, log_dir
        self.keys = Keys(prefix)
        self.partitions = partitions
        self.redis = redis
        self.secret = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
        self.receiver = Receiver(self.secret).start()
        self.gateway_port = free_port()
        self.worker_ports: list[int] = []
        self.children: list[Child] = []
        self.workers: list[Child] = []
        self.events: list[str] = []
        self.env = {"STREAMCREW_REDIS_URL": url, "STREAMCREW_PREFIX": prefix, "STREAMCREW_LEASE_S": "3",
                    "STREAMCREW_RETRY_BACKOFF_S": "0.2", "STREAMCREW_WEBHOOK_SECRET": self.secret, "STREAMCREW_LOG_LEVEL": "warning",
                    "STREAMCREW_PARTITIONS": str(partitions),
                    # The receiver is on loopback: the gateway (which refuses such webhooks otherwise) and the notifier allow it
                    "STREAMCREW_ALLOW_PRIVATE": "true"}
        if not options.use_llm:  # a blank base URL is the offline model: no tokens spent unless asked
            self.env |= {"STREAMCREW_LLM_BASE_URL": "", "STREAMCREW_LLM_API_KEYS": ""}

    def _spawn(self, name: str, *args: str, port: int | None = None) -> Child:
        env = {**self.env, "STREAMCREW_METRICS_PORT": str(port or 0)}
        child = Child(streamcrew_cmd(*args), env=env, log_path=self.log_dir / f"{name}-{len(self.children)}.log")
        self.children.append(child)
        return child

    def start_worker(self) -> Child:
        port = free_port()
        self.worker_ports.append(port)
        child = self._spawn("worker", "worker", "--concurrency", str(self.options.concurrency), port=port)
        self.workers.append(child)
        return child

    def start(self) -> None:
        for _ in range(self.options.workers):
            self.start_worker()
        self._spawn("notifier", "notifier", "--allow-private", "--backoff", "0.5")
        self._spawn("gateway", "gateway", "--port", str(self.gateway_port))

    async def wait_gateway(self, http: httpx.AsyncClient) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if (await http.get(f"{self.gateway_url}/readyz", timeout=1)).status_code == 200:
                    return
            await asyncio.sleep(0.1)
        raise RuntimeError("the gateway did not become ready:\n" + self.children[-1].log_text()[-2000:])

    @property
    def gateway_url(self) -> str:
        return f"http://127.0.0.1:{self.gateway_port}"

    async def send(self, http: httpx.AsyncClient, good: list[Planned], bad: list[Malformed]) -> None:
        """Send at ``rate`` per second: web traffic through the gateway, the rest through the Python API."""
        producer = Producer(self.redis, self.keys, partitions=self.partitions)
        per_tick = max(1, int(self.options.rate * 0.1)) if self.options.rate > 0 else len(good) + len(bad)
        items: list[Planned | Malformed] = [*good, *bad]
        items.sort(key=lambda x: x.job_id)
        for start in range(0, len(items), per_tick):
            t0 = time.monotonic()
            chunk = items[start : start + per_tick]
            by_lane: dict[str, list[JobRequest]] = {}
            posts = []
            for item in chunk:
                if isinstance(item, Malformed):
                    lane = keys_for_job(self.keys, self.partitions, item.job_id).lane("normal")  # where a producer would put it
                    await self.redis.xadd(lane, {**item.fields, "webhook": self.receiver.url})
                elif item.via_gateway:
                    body = {"agent": item.agent, "data": item.data, "id": item.job_id, "priority": item.priority, "webhook": self.receiver.url}
                    posts.append(http.post(f"{self.gateway_url}/jobs", json=body, timeout=30))
                else:
                    by_lane.setdefault(item.priority, []).append(
                        JobRequest(agent=item.agent, data=item.data, id=item.job_id, webhook=self.receiver.url))
            for lane, batch in by_lane.items():
                await producer.publish_many(batch, priority=lane)
            for response in await asyncio.gather(*posts):
                if response.status_code not in (200, 202):
                    self.events.append(f"gateway answered {response.status_code}: {response.text[:200]}")
            if self.options.rate > 0:
                await asyncio.sleep(max(0.0, 0.1 - (time.monotonic() - t0)))

    def chaos(self) -> None:
        victim = self.workers.pop(0)
        victim.kill()
        self.events.append(f"SIGKILLed worker pid {victim.pid} mid-run; its jobs are reclaimed after the 3 s lease")
        self.start_worker()

    def stop(self) -> None:
        """SIGTERM every child at once, then wait for them together (SIGKILL past the grace)."""
        for child in self.children:
            child.terminate()
        deadline = time.monotonic() + STOP_GRACE_S
        for child in self.children:
            if child.wait(max(0.0, deadline - time.monotonic())) is None:
                child.kill()
        self.receiver.stop()


async def play(demo: Demo, console: Console) -> dict[str, Any]:
    orders, products = _catalogue_ids()
    good, bad = plan(demo.options.requests, orders=orders, products=products)
    total = len(good) + len(bad)
    tally = Tally(demo.redis, demo.keys, [f"http://127.0.0.1:{p}/metrics" for p in demo.worker_ports], partitions=demo.partitions)
    show = not demo.options.as_json and console.is_terminal
    demo.start()
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=100)) as http:
        await demo.wait_gateway(http)
        t0 = time.monotonic()
        sender = asyncio.create_task(demo.send(http, good, bad))
        try:
            chaos_done = not demo.options.chaos
            with Live(console=console, refresh_per_second=4, transient=False) if show else contextlib.nullcontext() as live:
                deadline = time.monotonic() + RESULTS_TIMEOUT_S
                webhooks_deadline = None
                while time.monotonic() < deadline:
                    await tally.poll(http)
                    tally.metrics_urls = [f"http://127.0.0.1:{p}/metrics" for p in demo.worker_ports]
                    if not chaos_done and tally.results >= total // 2:
                        demo.chaos()
                        chaos_done = True
                    if live is not None:
                        live.update(live_view(tally, total=total, elapsed_s=time.monotonic() - t0, webhooks=demo.receiver.count(), events=demo.events))
                    if sender.done() and sender.exception():
                        raise sender.exception()  # type: ignore[misc]
                    if tally.results >= total:
                        webhooks_deadline = webhooks_deadline or time.monotonic() + WEBHOOKS_TIMEOUT_S
                        if demo.receiver.count()[0] >= total or time.monotonic() > webhooks_deadline:
                            break
                    await asyncio.sleep(POLL_S)
        finally:  # an interrupted run must not leave it sending into a Redis that is going away
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await sender
        seconds = time.monotonic() - t0
        await tally.poll(http)
    expected = {p.job_id for p in good} | {m.job_id for m in bad}
    delivered_jobs, deliveries = demo.receiver.count()
    return {
        "requests": total,
        "results": tally.results,
        "lost": len(expected - set(tally.ids)),
        "duplicated": sum(n - 1 for n in tally.ids.values() if n > 1),
        "seconds": round(seconds, 1),
        "throughput_per_s": round(tally.results / seconds, 1) if seconds else 0.0,
        "statuses": dict(tally.statuses),
        "queue_wait_ms": percentiles(tally.waits_ms),
        "run_ms": percentiles(tally.runs_ms),
        "retries": tally.retries,
        "reclaims": tally.reclaims,
        "dead_letters": tally.dead_letters,
        "workflows": {"sent": sum(1 for p in good if p.agent == "workflow"), **dict(tally.workflows),
                      "steps": len(tally.step_ids), "steps_duplicated": sum(n - 1 for n in tally.step_ids.values() if n > 1)},
        "webhooks": {"jobs": delivered_jobs, "deliveries": deliveries, "expected": total, "bad_signatures": demo.receiver.bad_signatures},
        "tokens": dict(tally.tokens),
        "cost_usd": {k: round(v, 6) for k, v in tally.cost_usd.items()},
        "offline": tally.offline,
        "chaos": "; ".join(e for e in demo.events if "SIGKILL" in e) or "off (--no-chaos)",
        "samples": tally.samples,
        "redis": loggable_url(demo.url),
        "prefix": demo.prefix,
        "llm": demo.options.llm_line,
        "gateway": demo.gateway_url,
    }


async def run_demo(settings: StreamSettings, options: DemoOptions) -> dict[str, Any]:
    """Run the demo; returns the report (also printed, as JSON with ``--json``).

    SIGTERM and SIGHUP end it as Ctrl-C does. On an outside Redis (``settings.redis_url``) it works under
    the prefix ``<prefix>-demo-<pid>`` and deletes that prefix's keys at the end, unless ``options.keep``.
    """
    async with interrupted_by(*INTERRUPTING):
        return await _run(settings, options)


async def _run(settings: StreamSettings, options: DemoOptions) -> dict[str, Any]:
    err = Console(stderr=True)
    out = Console()
    with tempfile.TemporaryDirectory(prefix="streamcrew-demo-") as tmp, contextlib.ExitStack() as stack:
        outside = bool(settings.redis_url)
        if settings.redis_url:
            url, prefix = settings.redis_url, f"{settings.prefix}-demo-{os.getpid()}"
            fate = "kept: --keep" if options.keep else "deleted at the end"
            where = f"Redis at {loggable_url(url)} (prefix {prefix}, its keys {fate})"
        else:
            server = stack.enter_context(embedded_redis())
            url, prefix = server.url, settings.prefix
            where = f"embedded Redis ({server.binary}) at {url}"
        err.print(f"{where}; logs in {tmp}", style="dim", markup=False, highlight=False, soft_wrap=True)
        if options.llm_endpoint and not options.use_llm:
            err.print(f"LLM: {options.llm_line}", style="yellow", markup=False, highlight=False, soft_wrap=True)
        demo = Demo(url, await connect_detected(url), prefix, settings.partitions, options, Path(tmp))
        try:
            report = await play(demo, err)
            report["ok"] = (report["lost"] == 0 and report["duplicated"] == 0 and report["results"] == report["requests"]
                            and report["workflows"]["steps_duplicated"] == 0)
            if options.as_json:
                print(json.dumps(report), flush=True)
            else:
                print_report(report, out)
            if options.serve:
                print_curl(out, demo.gateway_url)
                with contextlib.suppress(asyncio.CancelledError, KeyboardInterrupt):
                    await asyncio.Event().wait()
        finally:
            demo.stop()
            try:
                if outside:
                    await _leave_redis(demo, err)
            finally:
                await demo.redis.aclose()
    return report


async def _leave_redis(demo: Demo, err: Console) -> None:
    """Delete the demo's keys from an outside Redis, or say where they were kept."""
    where = f"Redis at {loggable_url(demo.url)}"
    if demo.options.keep:
        err.print(f"kept the demo's keys in {where}: SCAN MATCH '{demo.prefix}:*'", style="dim", markup=False, highlight=False, soft_wrap=True)
        return
    deleted = await delete_prefix(demo.redis, demo.prefix)
    err.print(f"deleted the demo's {deleted} keys ({demo.prefix}:*) from {where}", style="dim", markup=False, highlight=False, soft_wrap=True)
