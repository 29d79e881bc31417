"""Rich tables for the operator commands."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from consumers.monitor import as_text, report_rows, scope
from streams.envelope import DeadLetter
from streams.urls import loggable_url

if TYPE_CHECKING:
    from consumers.notifier.dead import WebhookDeadLetter

QUEUE_ROWS = frozenset({"Queue Depth", "Processing", "Retrying", "Dead Letters", "Window"})  # shown in the tables above
PARKED_TENANTS_IN_TABLE = 5  # the table names the tenants with the most parked jobs; --json has more (streams.stats)


def _num(value: Any) -> str:
    return "-" if value is None else f"{value:,}" if isinstance(value, int) else f"{value:.1f}"


def _lag(stream: dict[str, Any]) -> str:
    """A lag Redis cannot tell (nil: Redis 6, or an entry deleted before the group read it) is "unknown", never a
    dash that reads as none; "-" stays for a stream with nothing in it (no group to ask, nothing waiting)."""
    return _num(stream["lag"]) if stream["lag"] is not None or not stream["length"] else "unknown"


def _group(stream: dict[str, Any]) -> str:
    """The group's name, marked where the stream lacks it (deleted: every entry waits for a worker to make it again)."""
    if not stream.get("group_missing"):
        return str(stream["group"])
    where = stream.get("group_missing_partitions")
    if not where:
        return f"{stream['group']} (no group)"
    return f"{stream['group']} (no group in partition{'s' if len(where) > 1 else ''} {', '.join(map(str, where))})"


def stats_table(figures: dict[str, Any]) -> Group:
    streams = Table(title=Text(f"streams ({scope(figures)})"))  # a prefix may hold '[': not markup
    for column in ("stream", "group", "length", "pending", "lag", "oldest pending s", "consumers"):
        streams.add_column(column, justify="right" if column not in ("stream", "group") else "left")
    rows = [(name, s) for name, s in figures["lanes"].items()] + [("results", figures["results"])]
    for name, s in rows:
        streams.add_row(*as_text(name, _group(s), _num(s["length"]), _num(s["pending"]), _lag(s),
                                 _num(s["oldest_pending_age_s"]), str(len(s["consumers"]))))
    consumers = Table(title="consumers")
    for column in ("stream", "consumer", "pending", "idle s"):
        consumers.add_column(column)
    for name, s in rows:
        for c in s["consumers"]:
            consumers.add_row(*as_text(name, c["name"], _num(c["pending"]), _num(c["idle_s"])))
    totals = Table(show_header=False, box=None)
    totals.add_row("dead letters", _num(figures["dead_letters"]))
    totals.add_row("retrying", _num(figures["retrying"]))
    totals.add_row("parked (tenant cap)", _num(figures.get("parked", 0)))
    for tenant, n in list(figures.get("parked_by_tenant", {}).items())[:PARKED_TENANTS_IN_TABLE]:
        totals.add_row(*as_text(f"  tenant {tenant}", _num(n)))
    totals.add_row("resumed (ahead of their lane)", _num(figures.get("resumed", 0)))
    totals.add_row("webhook dead letters", _num(figures["webhooks"]["dead_letters"]))
    recent = Table(title=f"latest {figures['window']['results']:,} results", show_header=False)
    for name, value in report_rows(figures):
        if name not in QUEUE_ROWS:
            recent.add_row(*as_text(name, value))
    return Group(streams, consumers, totals, recent)


def _letters_table(title: str, columns: Sequence[str]) -> Table:
    """A dead-letter table: the entry ID (what `replay` takes) and the job id are never wrapped, so they copy whole."""
    table = Table(title=title)
    table.add_column("entry", no_wrap=True)
    table.add_column("job id", no_wrap=True)
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def dead_table(letters: Sequence[DeadLetter]) -> Table:
    table = _letters_table(f"{len(letters)} dead letters", ("agent", "reason", "attempts", "dead at", "error"))
    for d in letters:
        table.add_row(*as_text(d.entry_id or "", d.id, d.agent, d.reason, str(d.attempts), _when(d.dead_at), d.error[:200]))
    return table


def webhook_dead_table(letters: Sequence[WebhookDeadLetter]) -> Table:
    """The URL as the notifier logs it (no credentials, no query); ``--json`` gives the stored one. Every cell is
    plain text: the error quotes the receiver's answer and the id is the submitter's, so neither is read as markup."""
    table = _letters_table(f"{len(letters)} webhook dead letters", ("url", "attempts", "last status", "dead at", "error"))
    for d in letters:
        table.add_row(*as_text(d.entry_id, d.id, loggable_url(d.url), str(d.attempts), _num(d.last_status), _when(d.dead_at), d.error[:200]))
    return table
