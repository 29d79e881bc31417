"""Queue figures over every partition (contract §10): the sums ``stats`` shows, and each partition's own."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from redis.asyncio import Redis

from streams.keys import LANES, Keys
from streams.stats import most_parked, queue_stats
from streams.window import DEFAULT_WINDOW, window_figures

SUMMED = ("length", "pending", "lag")


def _merge_stream(parts: list[dict[str, Any]], numbers: Sequence[int], *, every: bool) -> dict[str, Any]:
    """One stream's figures summed over partitions (``numbers``: each one's); the oldest age is the oldest of any
    partition; the partitions whose stream lacks its group (their lag counted as their length) by number. Its name
    has ``{*}`` for the partition when ``every`` one is summed, else the numbers summed (``{2}``, ``{0,3}``)."""
    out = dict(parts[0])
    for name in SUMMED:
        values = [p[name] for p in parts]
        out[name] = None if any(v is None for v in values) else sum(values)
    ages = [p["oldest_pending_age_s"] for p in parts if p["oldest_pending_age_s"] is not None]
    out["oldest_pending_age_s"] = max(ages) if ages else None
    out["consumers"] = _merge_consumers([c for p in parts for c in p["consumers"]])
    out["last_delivered_id"] = None  # each partition's own is under ``partitions``
    # Told by each partition, not read from the merged last_delivered_id (always unset here)
    out["group_missing_partitions"] = [n for n, p in zip(numbers, parts, strict=True) if p.get("group_missing")]
    out["group_missing"] = bool(out["group_missing_partitions"])
    shown = "*" if every else ",".join(map(str, numbers))
    out["stream"] = str(parts[0]["stream"]).replace(f":{{{numbers[0]}}}:", f":{{{shown}}}:", 1)
    return out


def _merge_consumers(consumers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per consumer name (a worker reads every partition's lane): its pending summed, its idle time the
    shortest (it is as idle as its latest read anywhere). Each partition's own list stays under ``partitions``."""
    merged: dict[str, dict[str, Any]] = {}
    for c in consumers:
        if (seen := merged.get(c["name"])) is None:
            merged[c["name"]] = dict(c)
            continue
        seen["pending"] = (seen.get("pending") or 0) + (c.get("pending") or 0)
        idles = [i for i in (seen.get("idle_s"), c.get("idle_s")) if i is not None]
        seen["idle_s"] = min(idles) if idles else None
    return list(merged.values())


def _sum_counts(parts: Iterable[dict[str, int]]) -> dict[str, int]:
    """Each partition's most parked tenants, summed (a tenant past a partition's shown ones counts there as 0)."""
    total: Counter[str] = Counter()
    for counts in parts:
        total.update(counts)
    return dict(total)


async def partitioned_queue_stats(
    redis: Redis, keys: Keys, partitions: int, *, window: int | None = DEFAULT_WINDOW, only: Sequence[int] | None = None,
) -> dict[str, Any]:
    """:func:`~streams.stats.queue_stats` for N = 1; for N > 1 the sums, plus ``partitions``: each one's figures.

    ``only`` (``streams.keys.parse_partitions``' answer): the figures of those partitions alone, listed in
    ``partitions`` in that order and named in ``shown_partitions`` (``of_partitions``: N). The monitor's window
    figures cover the latest ``window`` results of the partitions read, together.
    """
    if partitions <= 1:
        return await queue_stats(redis, keys, window=window)
    numbers = list(range(partitions) if only is None else only)
    every_one = sorted(numbers) == list(range(partitions))  # named {*}; some of them, by number ({1,3})
    every = [keys.in_partition(p) for p in numbers]
    each = [await queue_stats(redis, k, window=None) for k in every]
    total: dict[str, Any] = {
        "prefix": keys.prefix,
        "lanes": {lane: _merge_stream([s["lanes"][lane] for s in each], numbers, every=every_one) for lane in LANES},
        "results": _merge_stream([s["results"] for s in each], numbers, every=every_one),
        "dead_letters": sum(s["dead_letters"] for s in each),
        "retrying": sum(s["retrying"] for s in each),
        "parked": sum(s["parked"] for s in each),
        "parked_by_tenant": most_parked(_sum_counts(s["parked_by_tenant"] for s in each)),
        "resumed": sum(s["resumed"] for s in each),
        "resumed_running": sum(s["resumed_running"] for s in each),
        "webhooks": {name: sum(s["webhooks"][name] for s in each) for name in ("dead_letters", "retrying")},
        "partitions": each,
    }
    if only is not None:
        total["shown_partitions"], total["of_partitions"] = numbers, partitions
    if window is not None:
        total.update(await window_figures(redis, every, window))
    return total
