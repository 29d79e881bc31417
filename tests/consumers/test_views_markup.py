"""Names that come from submitters (a tenant, a model, a consumer) are shown as text in the CLI's tables: read as
rich markup, a tenant named '[/x]' made `streamcrew stats` and `streamcrew monitor` on a terminal fail with a
MarkupError traceback, and '[link=...]' could restyle or add links to an operator's screen."""

from __future__ import annotations

import io

from rich.console import Console

from consumers.monitor import plain_report, rich_report
from consumers.views import dead_table, stats_table
from streams import dead
from streams.groups import ensure_groups, standard_groups
from streams.keys import Keys
from streams.stats import queue_stats

HOSTILE = "[/x][link=https://evil.example]acme[/link]"


def shown(renderable: object) -> str:
    console = Console(file=io.StringIO(), force_terminal=True, width=400, color_system=None)
    console.print(renderable)
    return console.file.getvalue()  # type: ignore[attr-defined]


async def test_stats_monitor_and_dead_list_show_submitted_names_as_text(redis, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    # Given a result whose tenant and model are markup, and a dead letter whose error and agent are
    await ensure_groups(redis, standard_groups(keys))
    await redis.xadd(keys.results, {"id": "j1", "agent": "echo", "status": "completed", "attempts": "1", "tenant": HOSTILE,
                                    "submitted_at": "1700000000000", "started_at": "1700000000010", "finished_at": "1700000000100",
                                    "usage": '{"model": "' + HOSTILE.replace('"', "") + '", "prompt_tokens": 1, "completion_tokens": 1, "cost_usd": 0.1}'})
    await redis.xadd(keys.dead, {"id": "[/id]", "agent": HOSTILE, "reason": "exhausted", "error": f"ValueError: {HOSTILE}",
                                 "source_stream": keys.lane("normal"), "source_id": "1-0", "attempts": "1", "dead_at": "1700000000000",
                                 "request": '{"agent": "echo", "data": "{}"}'})
    figures = await queue_stats(redis, keys)
    figures["prefix"] = keys.prefix
    # When the CLI's tables are drawn on a terminal
    # Then each shows the names as they were written
    for table in (stats_table(figures), rich_report(figures), dead_table(await dead.list_dead(redis, keys))):
        assert HOSTILE in shown(table).replace("\n", "")


ESCAPES = "\x1b[2J\x1b]8;;http://evil.example/\x1b\\link\x1b]8;;\x1b\\\u202eLIVE\r"


async def test_submitted_names_cannot_drive_the_operators_terminal(redis, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    # Given a result and a dead letter whose tenant, agent and error hold terminal escapes (clear screen, an OSC 8 link,
    # a bidi override, a carriage return): rich reads no markup in plain Text, but passes ESC and U+202E through
    await ensure_groups(redis, standard_groups(keys))
    await redis.xadd(keys.results, {"id": "j1", "agent": "echo", "status": "completed", "attempts": "1", "tenant": f"acme{ESCAPES}",
                                    "submitted_at": "1700000000000", "started_at": "1700000000010", "finished_at": "1700000000100"})
    await redis.xadd(keys.dead, {"id": "j2", "agent": f"echo{ESCAPES}", "reason": "exhausted", "error": f"boom{ESCAPES}",
                                 "source_stream": keys.lane("normal"), "source_id": "1-0", "attempts": "1", "dead_at": "1700000000000",
                                 "request": '{"agent": "echo", "data": "{}"}'})
    figures = await queue_stats(redis, keys)
    figures["prefix"] = "odd[/prefix]"
    # When the CLI's tables and the plain monitor report are drawn
    tables = [shown(t) for t in (stats_table(figures), rich_report(figures), dead_table(await dead.list_dead(redis, keys)))]
    # Then no escape reaches the output: each is shown as its escape sequence, so the operator sees it was there
    for text in [*tables, plain_report(figures)]:
        assert "\x1b" not in text and "\u202e" not in text, repr(text[:300])
    assert "\\x1b[2J" in "".join(tables).replace("\n", "") and "odd[/prefix]" in tables[0]
