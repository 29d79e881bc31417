"""The demo's live terminal view, its final report and the curl commands of ``--serve`` (rich)."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table

from consumers.demo.tally import Tally, percentiles


def live_view(t: Tally, *, total: int, elapsed_s: float, webhooks: tuple[int, int], events: list[str]) -> Group:
    rate = t.results / elapsed_s if elapsed_s > 0 else 0.0
    head = Table.grid(padding=(0, 2))
    head.add_row(ProgressBar(total=total, completed=t.results, width=40), f"{t.results}/{total} results", f"{rate:,.0f}/s", f"{elapsed_s:,.1f}s")
    figures = Table(show_header=False, box=None, padding=(0, 2))
    w, r = percentiles(t.waits_ms), percentiles(t.runs_ms)
    figures.add_row("in flight", str(t.in_flight), "backlog", "  ".join(f"{k} {v}" for k, v in t.backlog.items()))
    figures.add_row("queue wait ms", f"p50 {w['p50']}  p95 {w['p95']}  p99 {w['p99']}", "run ms", f"p50 {r['p50']}  p95 {r['p95']}  p99 {r['p99']}")
    figures.add_row("retries", str(t.retries), "reclaims", str(t.reclaims))
    figures.add_row("dead letters", str(t.dead_letters), "webhooks", f"{webhooks[0]} jobs, {webhooks[1]} deliveries")
    for model in sorted(t.tokens):
        figures.add_row("tokens", f"{model}: {t.tokens[model]:,}", "cost", f"${t.cost_usd.get(model, 0.0):.4f}")
    parts: list[Any] = [head, figures]
    if events:
        parts.append("\n".join(events[-3:]))
    return Group(Panel(Group(*parts), title="streamcrew demo — Black Friday burst"))


def print_report(report: dict[str, Any], console: Console) -> None:
    ok = "[green]" if report["lost"] == 0 and report["duplicated"] == 0 else "[red]"
    console.print(f"\n{ok}[bold]{report['requests']} requests in → {report['results']} results out, "
                  f"{report['lost']} lost, {report['duplicated']} duplicated[/bold]")
    table = Table(show_header=False, box=None, padding=(0, 2))
    table.add_row("time", f"{report['seconds']} s  ({report['throughput_per_s']} results/s)")
    table.add_row("statuses", ", ".join(f"{k} {v}" for k, v in sorted(report["statuses"].items())))
    table.add_row("queue wait ms", json.dumps(report["queue_wait_ms"]))
    table.add_row("run ms", json.dumps(report["run_ms"]))
    table.add_row("retries / reclaims", f"{report['retries']} / {report['reclaims']}")
    table.add_row("dead letters", str(report["dead_letters"]))
    wf = report["workflows"]
    table.add_row("workflows", f"{wf['sent']} product analyses (5 steps: reviews, pricing, inventory -> sentiment -> recommend): "
                  + ", ".join(f"{k} {v}" for k, v in sorted(wf.items()) if k not in ("sent", "steps", "steps_duplicated"))
                  + f"; {wf['steps']} step results, {wf['steps_duplicated']} duplicated")
    table.add_row("webhooks", f"{report['webhooks']['jobs']} of {report['webhooks']['expected']} jobs delivered, signatures verified "
                  f"({report['webhooks']['bad_signatures']} bad)")
    for model, tokens in report["tokens"].items():
        table.add_row(f"LLM {model}", f"{tokens:,} tokens, ${report['cost_usd'].get(model, 0.0):.4f}")
    table.add_row("LLM", report["llm"])
    table.add_row("chaos", report["chaos"])
    console.print(table)
    console.print("[bold]three sample answers[/bold]")
    for sample in report["samples"]:
        console.print_json(json.dumps(sample))


SAMPLE_JOB = {"agent": "support", "data": {"query": "where is my order ORD-10001?", "customer_id": "CUST-0001"}}


def curl_examples(base: str) -> list[str]:
    """What to try on the gateway ``--serve`` keeps; a long command goes on with ``\\`` (it pastes as one)."""
    return [
        f"curl -s {base}/queue/stats",
        f"curl -s -X POST {base}/jobs -H 'content-type: application/json' \\\n  -d '{json.dumps(SAMPLE_JOB)}'",
        f"curl -s {base}/jobs/bf-00001",
        f"curl -s {base}/jobs/bf-00001/result",
        f"curl -s {base}/dead",
    ]


def print_curl(out: Console, base: str) -> None:
    out.print(f"\n[bold]the gateway is still running at {base} (Ctrl-C to stop):[/bold]", soft_wrap=True)
    for command in curl_examples(base):  # soft_wrap: rich inserts no line break of its own
        out.print(command, markup=False, highlight=False, soft_wrap=True)
    out.file.flush()
