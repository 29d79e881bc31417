"""A real Prometheus server on loopback scrapes a real worker, evaluates our rules and runs our dashboard's queries."""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from streams.embedded import free_port
from tests.deploy.conftest import MetricsWorker
from tests.deploy.support import ALERTS, DASHBOARD
from tests.support import wait_until

SCRAPE_JOB = "streamcrew-worker"


@dataclass
class PrometheusServer:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    async def query(self, expr: str) -> dict[str, Any]:
        async with httpx.AsyncClient(timeout=5) as client:
            response = await client.get(f"{self.url}/api/v1/query", params={"query": expr})
        body: dict[str, Any] = response.json()
        return body

    async def scalar(self, expr: str) -> float | None:
        """The value of a one-series instant query, or None while it has no result."""
        body = await self.query(expr)
        assert body.get("status") == "success", f"query {expr!r} failed: {body}"
        result = body["data"]["result"]
        return float(result[0]["value"][1]) if result else None


@contextlib.contextmanager
def running_prometheus(binary: str, targets: list[int], tmp_path: Path, *, rule_files: Sequence[str] = (),
                       job: str = SCRAPE_JOB) -> Iterator[PrometheusServer]:
    """Prometheus on a free 127.0.0.1 port scraping ``127.0.0.1:<port>/metrics`` of each of ``targets`` every second."""
    port = free_port()
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": list(rule_files),
        "scrape_configs": [{"job_name": job, "static_configs": [{"targets": [f"127.0.0.1:{t}" for t in targets]}]}],
    }
    config_path = tmp_path / "prometheus.yml"
    config_path.write_text(yaml.safe_dump(config))
    log_path = tmp_path / "prometheus.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [binary, f"--config.file={config_path}", f"--storage.tsdb.path={tmp_path / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
    server = PrometheusServer(f"http://127.0.0.1:{port}", process, log_path)
    try:
        yield server
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


@pytest.fixture
def prometheus(prometheus_bin: str, metrics_worker: MetricsWorker, tmp_path: Path) -> Iterator[PrometheusServer]:
    """Prometheus on a free 127.0.0.1 port scraping the worker every second, with deploy/prometheus/alerts.yml loaded."""
    with running_prometheus(prometheus_bin, [metrics_worker.port], tmp_path, rule_files=[str(ALERTS)]) as server:
        yield server


async def ready(server: PrometheusServer) -> bool:
    assert server.process.poll() is None, f"prometheus exited with {server.process.returncode}:\n{server.log()}"
    try:
        async with httpx.AsyncClient(timeout=2) as client:
            return (await client.get(f"{server.url}/-/ready")).status_code == 200
    except httpx.TransportError:
        return False


async def test_prometheus_scrapes_the_worker_and_counts_its_jobs(prometheus: PrometheusServer, metrics_worker: MetricsWorker) -> None:
    # Given Prometheus scraping a worker that completed 12 jobs (and ended 14)
    await wait_until(lambda: ready(prometheus), timeout=30, what=f"prometheus to be ready; log:\n{prometheus.log()}")
    completed = 'sum(streamcrew_jobs_total{status="completed"})'

    async def scraped() -> bool:
        return await prometheus.scalar(completed) == metrics_worker.completed

    # When its HTTP API is asked for streamcrew_jobs_total
    await wait_until(scraped, timeout=30, every=0.25,
                     what=f"{completed} == {metrics_worker.completed} through Prometheus (last: {await prometheus.scalar(completed)})")
    # Then it holds what the worker did, and the target is up
    assert await prometheus.scalar("sum(streamcrew_jobs_total)") == metrics_worker.ended
    assert await prometheus.scalar(f'up{{job="{SCRAPE_JOB}"}}') == 1
    assert await prometheus.scalar('max(streamcrew_stream_length{stream="dead"})') == 2  # the hopeless one and the malformed one


async def test_prometheus_evaluates_every_alert_rule_without_error(prometheus: PrometheusServer) -> None:
    # Given Prometheus with deploy/prometheus/alerts.yml, evaluating every second over a live worker's series
    await wait_until(lambda: ready(prometheus), timeout=30, what=f"prometheus to be ready; log:\n{prometheus.log()}")
    expected = {r["alert"] for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]}
    rules: list[dict[str, Any]] = []

    async def evaluated() -> bool:
        nonlocal rules
        async with httpx.AsyncClient(timeout=5) as client:
            body = (await client.get(f"{prometheus.url}/api/v1/rules")).json()
        rules = [r for g in body["data"]["groups"] for r in g["rules"]]
        return len(rules) == len(expected) and all(not r["lastEvaluation"].startswith("0001") for r in rules)

    # When every rule has been evaluated at least once
    await wait_until(evaluated, timeout=30, every=0.25, what="every alert rule to be evaluated")
    # Then all of them loaded, and none failed at evaluation (e.g. many-to-many matching)
    assert {r["name"] for r in rules} == expected
    failed = {r["name"]: r.get("lastError") for r in rules if r["health"] != "ok"}
    assert not failed, f"rules failing at evaluation: {failed}"


async def test_prometheus_runs_every_dashboard_query(prometheus: PrometheusServer) -> None:
    # Given the Grafana dashboard's queries, with Grafana's $__rate_interval filled in
    await wait_until(lambda: ready(prometheus), timeout=30, what=f"prometheus to be ready; log:\n{prometheus.log()}")
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 20
    # When Prometheus runs each one
    failures = {}
    for expr in exprs:
        body = await prometheus.query(expr.replace("$__rate_interval", "1m").replace("$__interval", "15s"))
        if body.get("status") != "success":
            failures[expr] = body.get("error")
    # Then every one is valid PromQL
    assert not failures, f"dashboard queries Prometheus rejects: {failures}"
