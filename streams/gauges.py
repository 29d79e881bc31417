"""Stream and group gauges for /metrics, read from Redis at scrape time (contract §8).

A Prometheus collector runs in the metrics server's thread, so it uses a
synchronous client: two pipelined rounds per scrape (XLEN / XINFO / XPENDING,
then the first undelivered entry of each group), cached for ``cache_s`` so
several scrapers cost one round.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import redis as sync_redis
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import REGISTRY, Collector, CollectorRegistry

from streams.keys import LANES, NOTIFIER_GROUP, WORKERS_GROUP, Keys

log = logging.getLogger(__name__)


def _ms(entry_id: str | None) -> int | None:
    try:
        return int(str(entry_id).split("-", 1)[0]) if entry_id else None
    except ValueError:
        return None


def _next_id(entry_id: str) -> str:
    ms, _, seq = entry_id.partition("-")
    return f"{ms}-{int(seq or 0) + 1}"


class StreamGauges(Collector):
    """``streamcrew_stream_length`` (lanes, results, dead, webhooks_dead), ``_group_pending``, ``_group_lag`` and friends."""

    def __init__(self, redis_url: str, keys: Keys, *, cache_s: float = 1.0) -> None:
        self.keys = keys
        self.cache_s = cache_s
        self._redis = sync_redis.Redis.from_url(redis_url, decode_responses=True, socket_timeout=2, socket_connect_timeout=2)
        self._lock = threading.Lock()
        self._cached: list[GaugeMetricFamily] = []
        self._at = 0.0

    def streams(self) -> list[tuple[str, str, str]]:
        """(label, key, group) of every stream with a group."""
        return [(name, self.keys.lane(name), WORKERS_GROUP) for name in LANES] + [("results", self.keys.results, NOTIFIER_GROUP)]

    def describe(self) -> Iterator[GaugeMetricFamily]:
        """The names, without touching Redis (prometheus-client calls this at registration)."""
        for name in ("stream_length", "group_pending", "group_lag", "oldest_pending_age_seconds",
                     "oldest_undelivered_age_seconds", "group_consumers", "consumer_idle_seconds"):
            yield GaugeMetricFamily(f"streamcrew_{name}", "")

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._lock:
            if time.monotonic() - self._at > self.cache_s:
                try:
                    self._cached = self._read()
                except sync_redis.RedisError as exc:
                    log.warning("stream gauges: Redis unavailable (%s); reporting none this scrape", exc)
                    self._cached = []
                self._at = time.monotonic()
            yield from self._cached

    def _read(self) -> list[GaugeMetricFamily]:
        now_ms = int(time.time() * 1000)
        streams = self.streams()
        pipe = self._redis.pipeline(transaction=False)
        for _, key, group in streams:
            pipe.xlen(key)
            pipe.xinfo_groups(key)
            pipe.xpending(key, group)
            pipe.xinfo_consumers(key, group)
        pipe.xlen(self.keys.dead)
        pipe.xlen(self.keys.webhooks_dead)
        replies: list[Any] = pipe.execute(raise_on_error=False)

        length = GaugeMetricFamily("streamcrew_stream_length", "Entries in the stream", labels=["stream"])
        pending = GaugeMetricFamily("streamcrew_group_pending", "Entries delivered and not yet acknowledged", labels=["stream", "group"])
        lag = GaugeMetricFamily("streamcrew_group_lag", "Entries not yet delivered to the group (Redis >= 7)", labels=["stream", "group"])
        oldest_pending = GaugeMetricFamily("streamcrew_oldest_pending_age_seconds", "Age of the oldest unacknowledged entry", labels=["stream", "group"])
        oldest_waiting = GaugeMetricFamily("streamcrew_oldest_undelivered_age_seconds", "Age of the oldest entry not yet delivered", labels=["stream", "group"])
        consumers = GaugeMetricFamily("streamcrew_group_consumers", "Consumers in the group", labels=["stream", "group"])
        idle = GaugeMetricFamily("streamcrew_consumer_idle_seconds", "Seconds since the consumer last read", labels=["stream", "group", "consumer"])

        lookups: list[tuple[str, str]] = []
        for i, (name, _key, group) in enumerate(streams):
            xlen, groups, summary, members = replies[4 * i : 4 * i + 4]
            length.add_metric([name], 0 if isinstance(xlen, Exception) else int(xlen))
            info = next((g for g in groups if g.get("name") == group), None) if isinstance(groups, list) else None
            if info is None:
                continue
            pending.add_metric([name, group], int(info["pending"]))
            if info.get("lag") is not None:
                lag.add_metric([name, group], int(info["lag"]))
            first = _ms(summary.get("min")) if isinstance(summary, dict) else None
            oldest_pending.add_metric([name, group], max(0.0, (now_ms - first) / 1000) if first else 0.0)
            member_list = members if isinstance(members, list) else []
            consumers.add_metric([name, group], len(member_list))
            for c in member_list:
                idle.add_metric([name, group, c["name"]], int(c["idle"]) / 1000)
            lookups.append((name, str(info.get("last-delivered-id") or "0-0")))

        key_of = {name: (key, group) for name, key, group in streams}
        pipe = self._redis.pipeline(transaction=False)
        for name, last in lookups:
            pipe.xrange(key_of[name][0], min=_next_id(last), count=1)
        for (name, _), first_waiting in zip(lookups, pipe.execute(raise_on_error=False) if lookups else [], strict=True):
            group = key_of[name][1]
            first = _ms(first_waiting[0][0]) if isinstance(first_waiting, list) and first_waiting else None
            oldest_waiting.add_metric([name, group], max(0.0, (now_ms - first) / 1000) if first else 0.0)

        dead_len, webhooks_dead_len = replies[-2:]
        length.add_metric(["dead"], 0 if isinstance(dead_len, Exception) else int(dead_len))
        length.add_metric(["webhooks_dead"], 0 if isinstance(webhooks_dead_len, Exception) else int(webhooks_dead_len))
        return [length, pending, lag, oldest_pending, oldest_waiting, consumers, idle]


_registered: set[tuple[str, str]] = set()


def register_stream_gauges(redis_url: str, keys: Keys, registry: CollectorRegistry = REGISTRY) -> None:
    """Add the gauges to ``registry`` once per (Redis, prefix) in this process."""
    if (redis_url, keys.prefix) in _registered:
        return
    registry.register(StreamGauges(redis_url, keys))
    _registered.add((redis_url, keys.prefix))
