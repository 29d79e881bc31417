"""The queue monitor (contract §12): stats --json, GET /queue/stats and `streamcrew monitor`, checked
against results whose timings the test controls (echo with sleep_s) on a real worker."""

from __future__ import annotations

import json
import math
import os
import subprocess
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from consumers.monitor import TITLE, depth, rich_report
from consumers.processes import Child, streamcrew_cmd
from streams.groups import ensure_groups, standard_groups
from streams.keys import Keys, partition_keys
from streams.partition_stats import partitioned_queue_stats
from tests.consumers.gateway.support import GatewayFactory
from tests.support import WorkerFactory, results, wait_for_log, wait_results, wait_until

FAST_S, SLOW_S = 0.05, 1.5


def cli(redis_url: str, prefix: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(streamcrew_cmd(*args, "--redis-url", redis_url, "--prefix", prefix),
                          capture_output=True, text=True, timeout=60, env=os.environ.copy())


def nearest_rank(values: list[int], p: int) -> int:
    ordered = sorted(values)
    return ordered[math.ceil(p * len(ordered) / 100) - 1]


async def test_monitor_figures_match_the_jobs_the_test_timed(
    gateways: GatewayFactory, workers: WorkerFactory, redis, keys: Keys, redis_url: str, prefix: str,  # type: ignore[no-untyped-def]
) -> None:
    # Given a worker and, through the gateway, 18 fast and 2 slow echo jobs for two tenants, one that fails,
    # one that is rejected, and two ask jobs (offline model: tokens, no cost)
    gateway = await gateways.start()
    worker = workers.start("--concurrency", "30", wait_ready=False)
    wait_for_log(worker, " ready: ", timeout=120)  # CrewAI's import is slow on a loaded machine; the timings start after it
    jobs: list[dict[str, Any]] = [{"agent": "echo", "data": {"sleep_s": FAST_S}, "tenant": "acme"} for _ in range(18)]
    jobs += [{"agent": "echo", "data": {"sleep_s": SLOW_S}, "tenant": "globex"} for _ in range(2)]
    jobs += [{"agent": "echo", "data": {"fail_first": 1}, "max_attempts": 1, "tenant": "globex"},
             {"agent": "echo", "data": {"sleep_s": "slow"}},
             {"agent": "ask", "data": {"prompt": "one"}, "tenant": "acme"}, {"agent": "ask", "data": {"prompt": "two"}}]
    async with gateway.client() as client:
        for job in jobs:
            assert (await client.post("/jobs", json=job)).status_code == 202
        events = await wait_results(redis, keys, len(jobs), timeout=120)

        # When the figures are read over HTTP and from the CLI
        http = (await client.get("/queue/stats", params={"window": 100})).json()
        metrics = (await client.get("/metrics")).text
    done = cli(redis_url, prefix, "stats", "--json", "--window", "100")
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)

    # Then both give the same figures, and they are those of the results the jobs produced
    window_keys = ("window", "completed", "failed", "rejected", "expired", "latency_ms", "queue_wait_ms", "tokens", "cost_usd", "by_model", "by_tenant")
    assert {k: figures[k] for k in window_keys} == {k: http[k] for k in window_keys}
    assert (figures["completed"], figures["failed"], figures["rejected"], figures["expired"]) == (22, 1, 1, 0)
    latencies = [r.finished_at - r.submitted_at for r in events if r.status == "completed"]
    waits = [r.started_at - r.submitted_at for r in events if r.started_at is not None]
    for p in (50, 95, 99):
        assert figures["latency_ms"][f"p{p}"] == nearest_rank(latencies, p)
        assert figures["queue_wait_ms"][f"p{p}"] == nearest_rank(waits, p)
    assert figures["latency_ms"]["avg"] == round(sum(latencies) / len(latencies), 1)
    # And the timings the test chose show: the two slow jobs are the top ~9 %, so p95 and p99 are slow, p50 is not
    assert figures["latency_ms"]["p99"] >= SLOW_S * 1000 and figures["latency_ms"]["p95"] >= SLOW_S * 1000
    assert FAST_S * 1000 <= figures["latency_ms"]["p50"] < SLOW_S * 1000
    # And tokens and spend are per model and per tenant
    ask_tokens = [r.usage["prompt_tokens"] + r.usage["completion_tokens"] for r in events if r.agent == "ask"]
    assert figures["tokens"] == sum(ask_tokens) > 0 and figures["cost_usd"] == 0
    assert figures["by_model"] == {"offline-mock": {"results": 2, "tokens": sum(ask_tokens), "cost_usd": 0.0, "unpriced": 0}}
    assert figures["by_tenant"]["acme"]["results"] == 19 and figures["by_tenant"]["globex"]["results"] == 3
    # And the gateway exported how many jobs it submitted per lane
    submitted = {s.labels["lane"]: s.value for f in text_string_to_metric_families(metrics) for s in f.samples
                 if s.name == "streamcrew_jobs_submitted_total"}
    assert submitted == {"normal": len(jobs)}

    # And `streamcrew monitor --once` prints the report as plain lines when not a terminal
    once = cli(redis_url, prefix, "monitor", "--once", "--window", "100")
    assert once.returncode == 0, once.stderr
    lines = once.stdout.splitlines()
    assert TITLE in lines[0]
    assert "Completed: 22" in lines and "Failed: 1" in lines and "Rejected: 1" in lines
    assert f"P99 Latency: {figures['latency_ms']['p99']:,}ms" in lines
    assert any(line.startswith("Tenant acme: $0.0000, ") for line in lines)

    # And the rich panel, on a terminal, shows the same rows
    console = Console(record=True, force_terminal=True, width=120)
    console.print(rich_report(figures))
    text = console.export_text()
    assert TITLE in text and "P95 Latency" in text and f"{figures['latency_ms']['p95']:,}ms" in text


async def test_monitor_refreshes_every_interval(workers: WorkerFactory, redis, keys: Keys, redis_url: str, prefix: str, producer, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # Given a running monitor (not a terminal: one plain report per refresh)
    log = tmp_path / "monitor.log"
    child = Child(streamcrew_cmd("monitor", "--interval", "0.2", "--redis-url", redis_url, "--prefix", prefix), log_path=log)
    try:
        async def reports(n: int) -> bool:
            assert child.alive(), child.log_text()
            return child.log_text().count(TITLE) >= n

        await wait_until(lambda: reports(1), timeout=30, what="the first report")
        assert "Completed: 0" in child.log_text()
        # When a job completes
        workers.start("--agents", "echo", wait_ready=False)
        await producer.publish("echo", {}, id="seen")
        await wait_results(redis, keys, 1, timeout=90)

        # Then a later report counts it
        async def counted() -> bool:
            return "Completed: 1" in child.log_text()

        await wait_until(counted, timeout=30, what="a report counting the completed job")
    finally:
        child.stop(5)
    assert [r.id for r in await results(redis, keys)] == ["seen"]


async def test_a_tenant_key_sees_no_queue_wide_figures(gateways: GatewayFactory) -> None:
    gateway = await gateways.start({"STREAMCREW_API_KEYS": "k-operator,k-acme:acme"})
    async with gateway.client("k-acme") as acme, gateway.client("k-operator") as operator:
        denied = await acme.get("/queue/stats")
        assert denied.status_code == 403 and "by_tenant" not in denied.text
        assert (await operator.get("/queue/stats")).json()["by_tenant"] == {}
        assert (await operator.get("/queue/stats", params={"window": 0})).status_code == 422


async def test_a_result_entry_with_bytes_that_are_not_utf8_does_not_fail_the_figures(
    gateways: GatewayFactory, redis, keys: Keys, redis_url: str, prefix: str,  # type: ignore[no-untyped-def]
) -> None:
    # Given a user's raw XADD to the results stream whose tenant is not UTF-8 (and a model name that is)
    await redis.xadd(keys.results, {"id": "raw-1", "agent": "echo", "status": "completed", "attempts": "1", "tenant": b"acme\xff",
                                    "usage": '{"model": "m", "prompt_tokens": 3, "completion_tokens": 1, "cost_usd": 0.5}'})
    gateway = await gateways.start({"STREAMCREW_API_KEYS": "k-operator"})
    # When the operator asks for the figures, over HTTP and from the CLI
    async with gateway.client("k-operator") as operator:
        answer = await operator.get("/queue/stats")
    cli_answer = cli(redis_url, prefix, "stats", "--json")
    # Then both answer, the tenant shown with U+FFFD where its byte was
    assert answer.status_code == 200, answer.text
    assert answer.json()["by_tenant"] == {"acme\ufffd": {"results": 1, "tokens": 4, "cost_usd": 0.5, "unpriced": 0}}
    assert cli_answer.returncode == 0, cli_answer.stderr
    assert json.loads(cli_answer.stdout)["by_tenant"] == answer.json()["by_tenant"]


async def test_queue_depth_counts_each_partition_by_its_own_lag(redis, keys: Keys, needs_redis7) -> None:  # type: ignore[no-untyped-def]
    # Given 4 partitions of which only 0 and 1 have their lanes yet (a worker pinned to 0-1 made them), and in
    # partition 0's normal lane 3 raw requests, 2 of them delivered (running): 1 waits
    for k in partition_keys(keys, 4)[:2]:
        await ensure_groups(redis, standard_groups(k))
    lane = keys.in_partition(0).lane("normal")
    for n in range(3):
        await redis.xadd(lane, {"agent": "echo", "data": "{}", "n": str(n)})
    await redis.xreadgroup("workers", "w", {lane: ">"}, count=2)
    # When the monitor's queue depth is taken from the stats of every partition
    figures = await partitioned_queue_stats(redis, keys, 4, window=None)
    # Then it is the 1 waiting entry: partitions with no lane add none, and the 2 running are not counted as waiting
    # (one partition without a lag no longer turns the whole sum into every partition's stream length)
    assert depth(figures)["normal"] == 1, figures["lanes"]["normal"]
