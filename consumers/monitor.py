"""``streamcrew monitor``: the first design's "Queue Performance Report", live (contract §12).

The figures are ``streamcrew stats --json``'s; this module only lays them out:
a rich panel refreshed in place on a terminal, plain ``name: value`` lines
otherwise (logs, pipes, ``watch``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from streams.sizes import visible

TITLE = "Queue Performance Report"
Fetch = Callable[[], Awaitable[dict[str, Any]]]


def depth(figures: dict[str, Any]) -> dict[str, int]:
    """Entries waiting per lane: the group's lag (Redis >= 7), else the stream's length; with partitions, summed over
    each partition's own (one without a lag, its lane not made yet say, leaves the summed lag unknown)."""
    if "partitions" in figures:
        each = [depth(one) for one in figures["partitions"]]
        return {name: sum(one[name] for one in each) for name in figures["lanes"]}
    return {name: int(lane["lag"] if lane["lag"] is not None else lane["length"]) for name, lane in figures["lanes"].items()}


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}ms" if isinstance(value, float) else f"{value:,}ms"


def _usd(value: float | None) -> str:
    return "unknown" if value is None else f"${value:,.4f}"


def report_rows(figures: dict[str, Any]) -> list[tuple[str, str]]:
    """(name, value) pairs, in the design's order, then what streamcrew adds."""
    lanes = depth(figures)
    resumed, resumed_running = figures.get("resumed", 0), figures.get("resumed_running", 0)  # let go or handed back
    parked = figures.get("parked", 0)  # waiting over their tenant's cap (STREAMCREW_TENANT_MAX_RUNNING): queued too
    shown = {**lanes, **({"resumed": resumed} if resumed else {}), **({"parked": parked} if parked else {})}
    window = figures["window"]
    rows = [
        ("Queue Depth", f"{sum(shown.values()):,} ({', '.join(f'{k} {v:,}' for k, v in shown.items())})"),
        ("Processing", f"{sum(int(lane['pending']) for lane in figures['lanes'].values()) + resumed_running:,}"),
        ("Retrying", f"{figures['retrying']:,}"),
        ("Completed", f"{figures['completed']:,}"),
        ("Failed", f"{figures['failed']:,}"),
        ("Rejected", f"{figures['rejected']:,}"),
        ("Expired", f"{figures['expired']:,}"),
        ("Dead Letters", f"{figures['dead_letters']:,}"),
    ]
    latency, wait = figures["latency_ms"], figures["queue_wait_ms"]
    rows += [(f"{name} Latency", _ms(latency[key])) for name, key in (("Avg", "avg"), ("P50", "p50"), ("P95", "p95"), ("P99", "p99"))]
    rows.append(("Queue Wait", "  ".join(f"{key} {_ms(wait[key])}" for key in ("avg", "p50", "p95", "p99"))))
    rows.append(("Tokens", f"{figures['tokens']:,}"))
    unpriced = f" ({figures['unpriced']:,} results without a price)" if figures["unpriced"] else ""
    rows.append(("Total Cost", f"{_usd(figures['cost_usd'])}{unpriced}"))
    for title, key in (("Model", "by_model"), ("Tenant", "by_tenant")):
        for name, spend in figures[key].items():
            unpriced = f" ({spend['unpriced']:,} without a price)" if spend["unpriced"] else ""
            rows.append((f"{title} {name}", f"{_usd(spend['cost_usd'])}{unpriced}, {spend['tokens']:,} tokens, {spend['results']:,} results"))
    rows.append(("Window", f"last {window['results']:,} of {window['size']:,} results"))
    return rows


def as_text(*cells: str) -> list[Text]:
    """Table cells shown as written: tenants, models, agents and errors come from submitters, never rich markup,
    and never a control sequence for the terminal (``visible``: rich passes ESC and bidi overrides through)."""
    return [Text(visible(cell)) for cell in cells]


def scope(figures: dict[str, Any]) -> str:
    """Whose figures: the prefix, and the partitions shown when ``--partitions`` narrowed them."""
    shown = figures.get("shown_partitions")
    some = f", partitions {', '.join(map(str, shown))} of {figures['of_partitions']}" if shown is not None else ""
    return f"prefix {visible(figures['prefix'])}{some}"


def _heading(figures: dict[str, Any]) -> str:
    now = datetime.now(tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"{TITLE} ({scope(figures)}, {now})"


def plain_report(figures: dict[str, Any]) -> str:
    lines = [f"=== {_heading(figures)} ==="]
    lines += [visible(f"{name}: {value}") for name, value in report_rows(figures)]
    return "\n".join(lines)


def rich_report(figures: dict[str, Any]) -> Panel:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column(justify="right")
    for name, value in report_rows(figures):
        table.add_row(*as_text(name, value))
    return Panel(Group(table), title=Text(_heading(figures)), expand=False)


async def monitor(fetch: Fetch, console: Console, *, interval_s: float, once: bool) -> None:
    """Show the report every ``interval_s`` until cancelled (or once)."""
    figures = await fetch()
    if not console.is_terminal:
        while True:
            console.print(plain_report(figures), markup=False, highlight=False, soft_wrap=True)
            console.file.flush()
            if once:
                return
            await asyncio.sleep(interval_s)
            figures = await fetch()
    if once:
        console.print(rich_report(figures))
        return
    with Live(rich_report(figures), console=console, auto_refresh=False, transient=False) as live:
        while True:
            await asyncio.sleep(interval_s)
            live.update(rich_report(await fetch()), refresh=True)
