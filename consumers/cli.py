"""``streamcrew``: one thin typer entry point; each command parses, builds settings, and makes one call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from pydantic import ValidationError

from consumers import cli_dead  # noqa: F401 - registers `dead` and `webhooks dead`
from consumers import cli_kafka  # noqa: F401 - registers `kafka-bridge` (imports faust only when it runs)
from consumers.cli_base import Exit, MetricsHost, Prefix, RedisUrl, ShownPartitions, app, build, err, out, run, setup_logging, shown_partitions
from streams.config import StreamSettings
from streams.envelope import data_priority_problem, json_view
from streams.strict_json import has_wide_integer
from streams.workflow import WORKFLOW_AGENT

__all__ = ["app", "main"]


@app.command()
def worker(
    agents: Annotated[str | None, typer.Option(help="comma-separated agents to serve \\[default: all registered]")] = None,
    concurrency: Annotated[int | None, typer.Option(help="jobs run at once \\[env STREAMCREW_CONCURRENCY, default 100]")] = None,
    app_module: Annotated[list[str] | None, typer.Option("--app", help="module to import that registers agents (repeatable)")] = None,
    lease: Annotated[float | None, typer.Option(help="lease seconds \\[env STREAMCREW_LEASE_S, default 60]")] = None,
    metrics_port: Annotated[int | None, typer.Option(help="port of /metrics, 0 = off \\[env STREAMCREW_METRICS_PORT, default 9101]")] = None,
    metrics_host: MetricsHost = None,
    grace: Annotated[float | None, typer.Option(help="drain grace seconds \\[env STREAMCREW_GRACE_S, default 30]")] = None,
    log_level: Annotated[str | None, typer.Option(help="debug, info, warning, error")] = None,
    partitions: Annotated[str | None, typer.Option("--partitions", help="partitions to read, e.g. 0-3,5 \\[env STREAMCREW_SERVE_PARTITIONS, default: all]")] = None,
    tenant_max_running: Annotated[str | None, typer.Option(help='jobs of one tenant running at once, fleet-wide: N, or JSON {"*": N, "acme": M} \\[env STREAMCREW_TENANT_MAX_RUNNING, default: no cap]')] = None,
    llm_base_url: Annotated[str | None, typer.Option(help="OpenAI-compatible endpoint of the LLM agents \\[env STREAMCREW_LLM_BASE_URL, default: the offline model]")] = None,
    llm_api_keys: Annotated[str | None, typer.Option(help="comma-separated API keys, rotated on 429 (prefer the env variable) \\[env STREAMCREW_LLM_API_KEYS]")] = None,
    llm_model: Annotated[str | None, typer.Option(help="model name sent to the endpoint \\[env STREAMCREW_LLM_MODEL, default deepseek-v3.2]")] = None,
    redis_url: RedisUrl = None,
    prefix: Prefix = None,
) -> None:
    """Agent consumer: claims requests from the lanes and runs their agents."""
    from agents.llm import LLMSettings
    from consumers.settings import WorkerSettings
    from consumers.worker import load_registry, run_worker

    settings = build(WorkerSettings, agents=agents, concurrency=concurrency, app=app_module or None, lease_s=lease,
                     metrics_port=metrics_port, metrics_host=metrics_host, grace_s=grace, log_level=log_level, redis_url=redis_url, prefix=prefix,
                     serve_partitions=partitions, tenant_max_running=tenant_max_running)
    llm = build(LLMSettings, base_url=llm_base_url, api_keys=llm_api_keys, model=llm_model)
    setup_logging(settings.log_level)
    try:
        registry = load_registry(settings)
    except (ImportError, KeyError) as exc:
        err.print(f"cannot load agents: {exc}", style="red", markup=False, highlight=False)  # it quotes --app and --agents as given
        raise typer.Exit(Exit.USAGE) from None
    raise typer.Exit(run(run_worker(settings, registry, llm)))


@app.command()
def notifier(
    allow_private: Annotated[bool | None, typer.Option("--allow-private/--no-allow-private", help="deliver to loopback and private addresses too \\[env STREAMCREW_ALLOW_PRIVATE]", show_default=False)] = None,
    max_attempts: Annotated[int | None, typer.Option(help="delivery attempts per URL, the first included \\[env STREAMCREW_MAX_ATTEMPTS, default 8]")] = None,
    backoff: Annotated[float | None, typer.Option(help="first retry delay in seconds, doubled each time \\[env STREAMCREW_BACKOFF_S, default 5]")] = None,
    concurrency: Annotated[int | None, typer.Option(help="deliveries in flight \\[env STREAMCREW_CONCURRENCY, default 200]")] = None,
    lease: Annotated[float | None, typer.Option(help="lease seconds \\[env STREAMCREW_LEASE_S, default 60]")] = None,
    metrics_port: Annotated[int | None, typer.Option(help="port of /metrics, 0 = off \\[env STREAMCREW_METRICS_PORT, default 9102]")] = None,
    metrics_host: MetricsHost = None,
    grace: Annotated[float | None, typer.Option(help="drain grace seconds \\[env STREAMCREW_GRACE_S, default 20]")] = None,
    webhook_secret: Annotated[str | None, typer.Option(help="whsec_ secret(s), space-separated (prefer the env variable) \\[env STREAMCREW_WEBHOOK_SECRET]")] = None,
    log_level: Annotated[str | None, typer.Option(help="debug, info, warning, error")] = None,
    partitions: Annotated[str | None, typer.Option("--partitions", help="partitions to read, e.g. 0-3,5 \\[env STREAMCREW_SERVE_PARTITIONS, default: all]")] = None,
    redis_url: RedisUrl = None,
    prefix: Prefix = None,
) -> None:
    """Webhook fan-out consumer: POSTs every result to its webhook, signed (Standard Webhooks)."""
    from consumers.notifier import NotifierSettings, run_notifier

    settings = build(NotifierSettings, allow_private=allow_private, max_attempts=max_attempts, backoff_s=backoff, webhook_secret=webhook_secret,
                     concurrency=concurrency, lease_s=lease, metrics_port=metrics_port, metrics_host=metrics_host, grace_s=grace,
                     log_level=log_level, redis_url=redis_url, prefix=prefix, serve_partitions=partitions)
    setup_logging(settings.log_level)
    raise typer.Exit(run(run_notifier(settings)))


@app.command()
def gateway(
    host: Annotated[str | None, typer.Option(help="address to bind \\[env STREAMCREW_HOST, default 127.0.0.1]")] = None,
    port: Annotated[int | None, typer.Option(help="port \\[env STREAMCREW_PORT, default 8000]")] = None,
    log_level: Annotated[str | None, typer.Option(help="debug, info, warning, error")] = None,
    redis_url: RedisUrl = None,
    prefix: Prefix = None,
) -> None:
    """HTTP API: submit jobs, status, results, stats, dead letters (FastAPI on uvicorn)."""
    from consumers.gateway import GatewaySettings, run_gateway
    from streams.connection import connect_when_reachable
    from streams.keys import Keys
    from streams.layout import hold_layout

    settings = build(GatewaySettings, host=host, port=port, log_level=log_level, redis_url=redis_url, prefix=prefix)
    setup_logging(settings.log_level)

    async def ready() -> None:
        """Waits out a Redis that is down (a refusal is one line and exit 4); another N for the prefix is exit 2."""
        redis = await connect_when_reachable(settings.effective_redis_url, "gateway start")
        try:
            await hold_layout("gateway start", redis, Keys(settings.prefix), settings.partitions)
        finally:
            await redis.aclose()

    run(ready())
    run_gateway(settings)


@app.command("mock-llm")
def mock_llm(
    host: Annotated[str, typer.Option(help="address to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port")] = 8100,
    latency: Annotated[float, typer.Option(help="seconds each answer takes")] = 0.0,
    jitter: Annotated[float, typer.Option(help="random extra latency, up to this many seconds")] = 0.0,
    rate_limit: Annotated[float, typer.Option(help="fraction of requests answered 429 with Retry-After")] = 0.0,
    error_rate: Annotated[float, typer.Option(help="fraction of requests answered 5xx")] = 0.0,
    key_rps: Annotated[float | None, typer.Option(help="requests per second allowed per API key (429 beyond)")] = None,
    retry_after: Annotated[float, typer.Option(help="Retry-After seconds sent with 429")] = 1.0,
    seed: Annotated[int, typer.Option(help="seed of the fault injection")] = 0,
) -> None:
    """A local OpenAI- and Anthropic-compatible endpoint for development, tests and benchmarks."""
    from consumers.mock_llm import serve

    setup_logging("warning")
    serve(host, port, latency_s=latency, jitter_s=jitter, rate_limit=rate_limit, error_rate=error_rate,
          key_rps=key_rps, retry_after_s=retry_after, seed=seed)


# A data file is read up to this many times the largest request: its JSON is sent compact, so an indented file may be
# larger than the request it makes (the request's size is the Producer's check), but not without bound.
DATA_FILE_SHARES = 8


def _read_data(data: str, limit: int) -> str:
    """``--data``: JSON text, or ``@path`` to read it from a file: at most ``DATA_FILE_SHARES`` times ``limit`` (the
    largest request), a bound checked as it is read (a file of gigabytes, or @/dev/zero, filled the memory first)."""
    if not data.startswith("@"):
        return data
    most = DATA_FILE_SHARES * limit
    try:
        with Path(data[1:]).open("rb") as file:
            raw = file.read(most + 1)
    except OSError as exc:
        err.print(f"--data {data}: {exc}", style="red", markup=False, highlight=False)
        raise typer.Exit(Exit.USAGE) from None
    if len(raw) > most:
        err.print(f"--data {data}: over {most:,} bytes ({DATA_FILE_SHARES} times the largest request, "
                  f"STREAMCREW_MAX_REQUEST_BYTES): no request of that limit comes from it", style="red", markup=False, highlight=False)
        raise typer.Exit(Exit.USAGE)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:  # JSON is UTF-8; a Latin-1 export, say, is not
        err.print(f"--data {data}: not UTF-8 text ({exc.reason} at byte {exc.start})", style="red", markup=False, highlight=False)
        raise typer.Exit(Exit.USAGE) from None


@app.command()
def submit(
    agent: Annotated[str, typer.Argument(help="agent name")],
    data: Annotated[str, typer.Option(help="JSON object: the agent's input; @FILE reads it from a file (a workflow's graph, say)")] = "{}",
    priority: Annotated[str | None, typer.Option(help="high, normal, low or 0-10 \\[default: an integer priority 0-10 in --data (data.priority or data.data.priority; another number there is refused), else normal]")] = None,
    webhook: Annotated[str | None, typer.Option(help="URL the notifier POSTs the result to")] = None,
    id: Annotated[str | None, typer.Option("--id", help="job id and idempotency key")] = None,
    tenant: Annotated[str | None, typer.Option(help="tenant id")] = None,
    max_attempts: Annotated[int | None, typer.Option(help="attempts before the job fails, 1-1000")] = None,
    timeout_s: Annotated[float | None, typer.Option("--timeout-s", help="seconds one attempt may run, at most 86400 (the agent's default otherwise)")] = None,
    deadline: Annotated[int | None, typer.Option(help="epoch ms; a job not started by then ends expired")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="wait for the result and print it")] = False,
    timeout: Annotated[float, typer.Option(min=0, help="seconds --wait waits")] = 300.0,
    redis_url: RedisUrl = None,
    prefix: Prefix = None,
) -> None:
    """Publish one request; prints {"job_id", "status", "created"} as JSON (with --wait its result: exit 1 unless it completed, 3 when --timeout passed first)."""
    from consumers.ops import open_ops
    from consumers.progress import follow_workflow
    from consumers.webhook_targets import webhook_url_problem

    settings = build(StreamSettings, redis_url=redis_url, prefix=prefix)
    text = _read_data(data, settings.max_request_bytes)
    try:
        payload = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        err.print(f"[red]--data is not JSON: {exc}[/red]")
        raise typer.Exit(Exit.USAGE) from None
    if has_wide_integer(text):  # orjson reads one as a float: the job would get another number than the one given
        err.print("--data holds an integer beyond 64 bits; send it as a string", style="red", markup=False, highlight=False)
        raise typer.Exit(Exit.USAGE)
    if not isinstance(payload, dict):
        err.print("[red]--data must be a JSON object[/red]")
        raise typer.Exit(Exit.USAGE)
    if priority is None and (problem := data_priority_problem(payload)):  # it picks the lane: out of range, as --priority 12
        err.print(f"--data: {problem} (it picks the lane unless --priority is given)", style="red", markup=False, highlight=False)
        raise typer.Exit(Exit.USAGE)
    if webhook is not None and (problem := webhook_url_problem(webhook)):  # as POST /jobs answers 422, before anything is queued
        err.print(f"invalid webhook: {problem}", style="red", markup=False, highlight=False)
        raise typer.Exit(Exit.USAGE)

    async def go() -> int:
        async with open_ops(settings) as ops:
            try:
                follow = wait and agent == WORKFLOW_AGENT
                published, record = await ops.submit(agent, payload, wait_s=timeout if wait and not follow else None, priority=priority,
                                                     id=id, webhook=webhook, tenant=tenant, max_attempts=max_attempts,
                                                     timeout_s=timeout_s, deadline=deadline)
                if published.status == "conflict":  # POST /jobs answers 409 id_conflict
                    err.print("no free id for this job: raw XADDs took both names it could have; nothing was queued, submit it again",
                              style="red", markup=False, highlight=False)
                    return Exit.JOB_FAILED
                if follow:
                    record = await follow_workflow(ops.redis, ops.keys, published.job_id, timeout_s=timeout, partitions=settings.partitions,
                                                   show=lambda line: err.print(line, markup=False, highlight=False))
            except ValidationError as exc:  # pydantic's text is a block with a link: one line per field, as build() says a setting's
                for e in exc.errors():
                    err.print(f"invalid {'.'.join(map(str, e['loc'])) or 'request'}: {e['msg'].removeprefix('Value error, ')}",
                              style="red", markup=False, highlight=False)
                return Exit.USAGE
            except ValueError as exc:  # it may quote what was given: printed as is, not as rich markup
                err.print(str(exc), style="red", markup=False, highlight=False)
                return Exit.USAGE
        if not wait:
            print(json.dumps({"job_id": published.job_id, "status": published.status, "created": published.created}))
            return Exit.OK
        if record is None or not record.terminal:
            err.print(f"[yellow]job {published.job_id} not finished after {timeout}s (status {record.status if record else 'unknown'})[/yellow]")
            return Exit.TIMEOUT
        print(json.dumps(record.as_result().to_json_dict()))
        return Exit.OK if record.status == "completed" else Exit.JOB_FAILED

    raise typer.Exit(run(go()))


@app.command()
def job(
    job_id: Annotated[str, typer.Argument(help="the job's id (an id-less job's is the one submit or POST /jobs gave)")],
    redis_url: RedisUrl = None,
    prefix: Prefix = None,
) -> None:
    """Print one job's status record as JSON (as GET /jobs/{id} shows it); exit 1 when no job has that id."""
    from consumers.ops import open_ops

    settings = build(StreamSettings, redis_url=redis_url, prefix=prefix)

    async def go() -> dict[str, Any] | None:
        async with open_ops(settings) as ops:
            record = await ops.job(job_id)
        return None if record is None else {"job_id": record.id, **json_view(record, exclude_none=True, exclude=frozenset({"id"}))}

    shown = run(go())
    if shown is None:
        err.print(f"no job {job_id!r} under prefix {settings.prefix!r} (unknown, or its record expired)", markup=False, highlight=False)
        raise typer.Exit(Exit.NOT_FOUND)
    print(json.dumps(shown))


@app.command()
def watch(
    from_start: Annotated[bool, typer.Option("--from-start", help="replay the results stream from its start")] = False,
    count: Annotated[int | None, typer.Option(min=1, help="stop after this many results")] = None,
    redis_url: RedisUrl = None,
    prefix: Prefix = None,
) -> None:
    """Follow the results stream, one JSON line per result."""
    from consumers.ops import open_ops

    settings = build(StreamSettings, redis_url=redis_url, prefix=prefix)

    async def go() -> int:
        async with open_ops(settings) as ops:
            async for result in ops.watch(from_id="0" if from_start else "$", count=count):
                print(json.dumps(result.to_json_dict()), flush=True)
        return Exit.OK

    try:
        raise typer.Exit(run(go()))
    except KeyboardInterrupt:
        raise typer.Exit(Exit.OK) from None


Window = Annotated[int, typer.Option(min=1, max=10_000, help="how many of the latest results the figures cover")]


@app.command()
def stats(
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    window: Window = 1000,
    partitions: ShownPartitions = None,
    redis_url: RedisUrl = None,
    prefix: Prefix = None,
) -> None:
    """Lane lengths, pending, lag, dead letters, consumers; outcomes, latency, tokens and cost of the latest results."""
    from consumers.ops import open_ops
    from consumers.views import stats_table

    settings = build(StreamSettings, redis_url=redis_url, prefix=prefix)
    only = shown_partitions(partitions, settings)

    async def go() -> dict[str, Any]:
        async with open_ops(settings) as ops:
            return await ops.stats(window, only=only)

    figures = run(go())
    if as_json:
        print(json.dumps(figures, indent=2))
    else:
        out.print(stats_table(figures))


@app.command()
def monitor(
    interval: Annotated[float, typer.Option(min=0.1, help="seconds between refreshes")] = 5.0,
    once: Annotated[bool, typer.Option("--once", help="print one report and exit")] = False,
    window: Window = 1000,
    partitions: ShownPartitions = None,
    redis_url: RedisUrl = None,
    prefix: Prefix = None,
) -> None:
    """The Queue Performance Report, refreshed in place (plain lines when not a terminal)."""
    from consumers.monitor import monitor as show
    from consumers.ops import open_ops

    settings = build(StreamSettings, redis_url=redis_url, prefix=prefix)
    only = shown_partitions(partitions, settings)

    async def go() -> int:
        async with open_ops(settings) as ops:
            await show(lambda: ops.stats(window, only=only), out, interval_s=interval, once=once)
        return Exit.OK

    try:
        raise typer.Exit(run(go()))
    except KeyboardInterrupt:
        raise typer.Exit(Exit.OK) from None


@app.command()
def demo(
    requests: Annotated[int, typer.Option(help="how many requests to play")] = 2000,
    rate: Annotated[float, typer.Option(help="requests per second sent (0 = all at once)")] = 500.0,
    workers: Annotated[int, typer.Option(help="worker processes")] = 2,
    concurrency: Annotated[int, typer.Option(help="concurrency per worker (crews are CPU-bound: more only queues them inside the worker)")] = 32,
    chaos: Annotated[bool, typer.Option("--chaos/--no-chaos", help="SIGKILL one worker half-way")] = True,
    serve: Annotated[bool, typer.Option("--serve", help="keep the gateway running after the report")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the report as JSON (no live view)")] = False,
    use_llm: Annotated[bool, typer.Option("--use-llm", help="call the endpoint of STREAMCREW_LLM_BASE_URL (spends tokens: about 1,000 a request); without it the demo uses its offline model")] = False,
    keep: Annotated[bool, typer.Option("--keep", help="on an outside Redis (--redis-url, STREAMCREW_REDIS_URL): keep the demo's keys (<prefix>-demo-<pid>:*) instead of deleting them at the end")] = False,
    redis_url: RedisUrl = None,
    prefix: Prefix = None,
) -> None:
    """The whole pipeline on an embedded Redis (unless STREAMCREW_REDIS_URL is set) and an offline LLM (unless --use-llm)."""
    from rich.markup import escape

    from agents.builtin import CREWAI_EXTRA, crewai_installed
    from agents.llm import LLMSettings
    from consumers.demo import DemoOptions, run_demo
    from streams.urls import loggable_url

    if not crewai_installed():
        err.print(f"[red]the demo runs the CrewAI support crews: {escape(CREWAI_EXTRA)}[/red]")
        raise typer.Exit(Exit.USAGE)
    if requests < 1:
        err.print("[red]--requests must be at least 1[/red]")
        raise typer.Exit(Exit.USAGE)
    settings = build(StreamSettings, redis_url=redis_url, prefix=prefix)
    llm = build(LLMSettings)
    if use_llm and llm.base_url is None:
        err.print("[red]--use-llm needs STREAMCREW_LLM_BASE_URL (and usually STREAMCREW_LLM_API_KEYS): see docs/llm.md[/red]")
        raise typer.Exit(Exit.USAGE)
    setup_logging("warning")
    options = DemoOptions(requests=requests, rate=rate, workers=workers, concurrency=concurrency, chaos=chaos, serve=serve, as_json=as_json,
                          keep=keep, use_llm=use_llm, llm_endpoint=loggable_url(llm.base_url) if llm.base_url else None)
    report = run(run_demo(settings, options))
    raise typer.Exit(Exit.OK if report["ok"] else Exit.JOB_FAILED)


def main() -> None:
    from consumers.processes import die_with_parent

    die_with_parent()
    app()


if __name__ == "__main__":
    main()
