"""Queue figures for ``streamcrew stats``, the gateway and the gauges: one pipelined round."""

from __future__ import annotations

import time
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from streams.keys import LANES, NOTIFIER_GROUP, WORKERS_GROUP, Keys
from streams.raw import repaired
from streams.tenant_cap import parked_tenants_key
from streams.window import DEFAULT_WINDOW, window_figures


def _age_s(entry_id: str | None, now_ms: int) -> float | None:
    if not entry_id:
        return None
    try:
        return max(0.0, (now_ms - int(entry_id.split("-", 1)[0])) / 1000)
    except ValueError:
        return None


async def _stream_stats(redis: Redis, stream: str, group: str, now_ms: int) -> dict[str, Any]:
    async with redis.pipeline(transaction=False) as pipe:
        pipe.xlen(stream)
        pipe.xinfo_groups(stream)
        pipe.xpending(stream, group)
        pipe.xinfo_consumers(stream, group)
        try:
            length, groups, pending, consumers = await pipe.execute(raise_on_error=False)
        except ResponseError:
            length, groups, pending, consumers = 0, [], None, []
    # XINFO GROUPS answers for a stream that exists (an error for one that does not): one without the group had it
    # deleted (XGROUP DESTROY). A worker makes it again at ID 0 (streams.groups), so every entry is undelivered.
    stream_exists = not isinstance(groups, Exception)
    if isinstance(groups, Exception):
        groups = []
    if isinstance(pending, Exception):
        pending = None
    if isinstance(consumers, Exception):
        consumers = []
    info = next((g for g in groups if g.get("name") == group), None)
    group_missing = stream_exists and info is None
    lag = info.get("lag") if info else (length if group_missing and not isinstance(length, Exception) else None)
    oldest_pending = pending.get("min") if pending else None
    return {
        "stream": stream,
        "group": group,
        "length": int(length) if not isinstance(length, Exception) else 0,
        "pending": int(info["pending"]) if info else 0,
        "lag": int(lag) if lag is not None else None,
        "group_missing": group_missing,
        "last_delivered_id": info.get("last-delivered-id") if info else None,
        "oldest_pending_age_s": _age_s(oldest_pending, now_ms),
        "consumers": [
            {"name": repaired(c["name"]), "pending": int(c["pending"]), "idle_s": int(c["idle"]) / 1000}  # XGROUP CREATECONSUMER takes any bytes
            for c in consumers
        ],
    }


def _group_figure(groups: object, group: str, name: str) -> int:
    """``group``'s ``lag`` or ``pending`` in an XINFO GROUPS reply (0 for an error: no such stream yet, or no group)."""
    info = next((g for g in groups if g.get("name") == group), None) if isinstance(groups, list) else None
    return int(info.get(name) or 0) if info else 0


PARKED_TENANTS_SHOWN = 20  # stats name the tenants with the most parked jobs: thousands of tenants would swamp it


def most_parked(counts: dict[str, int]) -> dict[str, int]:
    """The ``PARKED_TENANTS_SHOWN`` tenants with the most parked jobs, most first (ties by name)."""
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return dict(ranked[:PARKED_TENANTS_SHOWN])


async def queue_stats(redis: Redis, keys: Keys, *, window: int | None = DEFAULT_WINDOW) -> dict[str, Any]:
    """Per lane length, pending, lag (Redis >= 7; the length where ``group_missing``), oldest pending age and consumers;
    results; dead letters; retries waiting; jobs parked over their tenant's cap, and the tenants with the most;
    and, unless ``window`` is None, the monitor's figures over the last ``window`` results (``streams.window``)."""
    now_ms = int(time.time() * 1000)
    lanes = {name: await _stream_stats(redis, keys.lane(name), WORKERS_GROUP, now_ms) for name in LANES}
    results = await _stream_stats(redis, keys.results, NOTIFIER_GROUP, now_ms)
    async with redis.pipeline(transaction=False) as pipe:
        pipe.xlen(keys.dead)
        pipe.zcard(keys.delayed)
        pipe.xlen(keys.webhooks_dead)
        pipe.zcard(keys.webhooks_delayed)
        pipe.hgetall(parked_tenants_key(keys))
        for lane in LANES:
            pipe.xinfo_groups(keys.resumed(lane))
        replies = await pipe.execute(raise_on_error=False)  # a resumed stream not made yet answers an error: 0
    if failed := next((r for r in replies[:5] if isinstance(r, Exception)), None):
        raise failed
    dead, delayed, wh_dead, wh_delayed, parked, *resumed = replies
    parked_by = {str(tenant): int(n) for tenant, n in (parked or {}).items()}
    figures: dict[str, Any] = {
        "prefix": keys.prefix,
        "lanes": lanes,
        "results": results,
        "dead_letters": int(dead),
        "retrying": int(delayed),
        "parked": sum(parked_by.values()),  # over their tenant's cap (streams.tenant_cap)
        "parked_by_tenant": most_parked(parked_by),
        # let go or handed back, read before their lane: waiting, and running (what the monitor adds to depth and processing)
        "resumed": sum(_group_figure(groups, WORKERS_GROUP, "lag") for groups in resumed),
        "resumed_running": sum(_group_figure(groups, WORKERS_GROUP, "pending") for groups in resumed),
        "webhooks": {"dead_letters": int(wh_dead), "retrying": int(wh_delayed)},
    }
    if window is not None:
        figures.update(await window_figures(redis, keys, window))
    return figures
