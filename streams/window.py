"""Queue-monitor figures over the results stream's most recent entries (contract §12).

The results stream's last ``window`` entries (read in pages, keeping only the fields the figures
need) and arithmetic: the figures are exact for that window, and there is no
second copy of them to keep consistent.

- ``latency_ms``: submitted → finished, over the ``completed`` results (what a caller waits).
- ``queue_wait_ms``: submitted → started, over every result that started (the second
  design's queue latency; it says whether more workers are needed).
- percentiles are nearest-rank: each one is a value some job really had.
- ``cost_usd`` sums the known costs; ``unpriced`` counts results whose model has no price; in
  ``by_model`` and ``by_tenant`` a ``cost_usd`` is null when all its LLM use was unpriced.
- a workflow's own result is counted as a result, but not its ``usage``: that is the sum of its
  steps', and each step's result carries its own (counting both would count the spend twice).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, TypedDict, cast

from redis.asyncio import Redis

from streams.envelope import MAX_EPOCH_MS, JobResult, Status, entry_order
from streams.errors import DecodeError
from streams.keys import Keys
from streams.raw import not_utf8, repaired_fields
from streams.usage import clean
from streams.workflow import WORKFLOW_AGENT

DEFAULT_WINDOW = 1000
MAX_WINDOW = 10_000
OUTCOMES = (Status.COMPLETED, Status.FAILED, Status.REJECTED, Status.EXPIRED)


class Spread(TypedDict):
    avg: float | None
    p50: int | None
    p95: int | None
    p99: int | None


class Spend(TypedDict):
    results: int
    tokens: int
    cost_usd: float | None  # None only when every priced-able result had no known price
    unpriced: int


def spread(values: Sequence[int]) -> Spread:
    """Average and nearest-rank p50/p95/p99 of ``values``; all None when there are none."""
    if not values:
        return {"avg": None, "p50": None, "p95": None, "p99": None}
    ordered = sorted(values)

    def rank(p: int) -> int:
        return ordered[max(0, math.ceil(p * len(ordered) / 100) - 1)]

    return {"avg": round(sum(ordered) / len(ordered), 1), "p50": rank(50), "p95": rank(95), "p99": rank(99)}


def _tokens_and_cost(usage: dict[str, Any]) -> tuple[int, float | None]:
    """A result's tokens and cost within a ledger's bounds (streams.usage.clean): a raw XADD's negative or huge
    amounts would otherwise reach the sums (an inf cost printed as Infinity, a token sum past 64 bits)."""
    ledger = clean(usage)
    return ledger["prompt_tokens"] + ledger["completion_tokens"], ledger["cost_usd"]


def _epoch(value: int | None) -> int | None:
    """An epoch-ms time, or None for a number no clock gives (a user's raw XADD): it would skew the percentiles, and
    past a float's range the average overflowed (stats, the monitor and GET /queue/stats all failed)."""
    return value if value is not None and 0 <= value <= MAX_EPOCH_MS else None


def _spend(into: dict[str, Spend], name: str, tokens: int, cost: float | None, unpriced: bool) -> None:
    entry = into.setdefault(name, {"results": 0, "tokens": 0, "cost_usd": None, "unpriced": 0})
    entry["results"] += 1
    entry["tokens"] += tokens
    entry["unpriced"] += unpriced
    if cost is not None:
        entry["cost_usd"] = (entry["cost_usd"] or 0.0) + cost


def summarize(results: Iterable[JobResult], *, window: int = DEFAULT_WINDOW) -> dict[str, Any]:
    """The §12 figures of ``results`` (newest first, as XREVRANGE gives them)."""
    outcomes: Counter[str] = Counter()
    latencies: list[int] = []
    waits: list[int] = []
    tokens, unpriced, seen = 0, 0, 0
    cost = 0.0
    by_model: dict[str, Spend] = {}
    by_tenant: dict[str, Spend] = {}
    newest = oldest = None
    for result in results:
        seen += 1
        outcomes[str(result.status)] += 1
        submitted, started, finished = _epoch(result.submitted_at), _epoch(result.started_at), _epoch(result.finished_at)
        if finished is not None:
            newest = finished if newest is None else max(newest, finished)
            oldest = finished if oldest is None else min(oldest, finished)
        if submitted is not None and started is not None:
            waits.append(max(0, started - submitted))  # hosts' clocks may differ a little
        if result.status == Status.COMPLETED and submitted is not None and finished is not None:
            latencies.append(max(0, finished - submitted))
        job_tokens, job_cost, job_unpriced = 0, None, False
        if result.usage and result.agent != WORKFLOW_AGENT:  # a workflow's usage sums its steps', each a result too
            job_tokens, job_cost = _tokens_and_cost(result.usage)
            job_unpriced = job_cost is None
            tokens += job_tokens
            unpriced += job_unpriced
            cost += job_cost or 0.0
            _spend(by_model, str(result.usage.get("model") or "unknown"), job_tokens, job_cost, job_unpriced)
        if result.tenant:
            _spend(by_tenant, result.tenant, job_tokens, job_cost, job_unpriced)
    return {
        "window": {"size": window, "results": seen, "oldest_finished_at": oldest, "newest_finished_at": newest},
        **{str(status): outcomes[str(status)] for status in OUTCOMES},
        "latency_ms": spread(latencies),
        "queue_wait_ms": spread(waits),
        "tokens": tokens,
        "cost_usd": round(cost, 9),
        "unpriced": unpriced,
        "by_model": {name: _rounded(s) for name, s in sorted(by_model.items())},
        "by_tenant": {name: _rounded(s) for name, s in sorted(by_tenant.items())},
    }


def _rounded(spend: Spend) -> Spend:
    cost = spend["cost_usd"]
    if cost is None and not spend["unpriced"]:
        cost = 0.0  # no LLM use at all: nothing spent, not an unknown price
    return {**spend, "cost_usd": None if cost is None else round(cost, 9)}


UNKNOWN_USAGE = '{"cost_usd": null}'


# The fields the figures read (summarize): never ``result`` or ``error``, which can be large.
FIGURE_FIELDS = frozenset({"id", "agent", "status", "attempts", "submitted_at", "started_at", "finished_at", "usage", "tenant"})
# Pages of XREVRANGE: the first is small and they grow while their entries are, up to PAGE_MAX, so a page of large
# outputs holds Redis (and the caller's event loop) for a few milliseconds, not for a whole window of them.
PAGE_FIRST, PAGE_MAX = 16, 1000
PAGE_BYTES = 4 << 20


def _next_page(entries: int, size: int, page: int) -> int:
    """The next page's count: as many entries of this page's mean size as fit in PAGE_BYTES, at most twice this one."""
    fit = PAGE_BYTES * entries // max(1, size)
    return max(1, min(PAGE_MAX, 2 * page, fit))


async def _newest_entries(redis: Redis, stream: str, count: int) -> list[tuple[str, dict[str, str]]]:
    """The stream's newest ``count`` entries, newest first, each with its :data:`FIGURE_FIELDS` only.

    One XREVRANGE of a whole window sent every agent's output with it: 1,000 outputs of 1 MiB held Redis for half
    a second and took the caller 1 GB; in pages, Redis serves others in between and the outputs are dropped at once.
    """
    entries: list[tuple[str, dict[str, str]]] = []
    upto, page = "+", PAGE_FIRST
    while len(entries) < count:
        ask = min(page, count - len(entries))
        batch = cast(list[tuple[str, dict[str, str]]], await redis.xrevrange(stream, max=upto, min="-", count=ask))
        size = 0
        for entry_id, fields in batch:
            size += sum(len(k) + len(v) for k, v in fields.items())
            entries.append((entry_id, {k: v for k, v in fields.items() if k in FIGURE_FIELDS}))
        if len(batch) < ask:
            break
        upto = f"({batch[-1][0]}"
        page = _next_page(len(batch), size, page)
    return entries


async def recent_results(redis: Redis, keys: Keys | Sequence[Keys], window: int = DEFAULT_WINDOW) -> list[JobResult]:
    """The last ``window`` result events, newest first, without their outputs; entries that do not decode are skipped.

    Given several partitions' keys, the last ``window`` of them all, in entry-ID order (contract §10).
    """
    if not 1 <= window <= MAX_WINDOW:
        raise ValueError(f"window must be 1-{MAX_WINDOW}, got {window}")
    partitions = [keys] if isinstance(keys, Keys) else list(keys)
    entries: list[tuple[str, dict[str, str]]] = []
    for k in partitions:
        entries += await _newest_entries(redis, k.results, window)
    if len(partitions) > 1:
        entries = sorted(entries, key=lambda e: entry_order(e[0]), reverse=True)[:window]
    out: list[JobResult] = []
    for _, fields in entries:
        if not_utf8(fields):  # a raw XADD's bytes: as lone surrogates a tenant or model name failed the JSON (a 500)
            fields = repaired_fields(fields)
        try:
            out.append(JobResult.from_fields(fields))
        except DecodeError:
            if "usage" not in fields:
                continue
            try:  # a usage that is no JSON object (a raw XADD's NaN, a list): the result still counts, its cost unknown
                out.append(JobResult.from_fields({**fields, "usage": UNKNOWN_USAGE}))
            except DecodeError:
                continue
    return out


async def window_figures(redis: Redis, keys: Keys | Sequence[Keys], window: int = DEFAULT_WINDOW) -> dict[str, Any]:
    """:func:`summarize` over the results stream's (or the partitions' results streams') last ``window`` entries."""
    return summarize(await recent_results(redis, keys, window), window=window)
