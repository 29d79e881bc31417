"""Stream and group gauges for /metrics, read from Redis at scrape time (contract §8).

A Prometheus collector runs in the metrics server's thread, so it uses a
synchronous client (a cluster client when the server is a Redis Cluster node):
two pipelined rounds per scrape (XLEN / XINFO / XPENDING, then the first
undelivered entry of each group), cached for ``cache_s`` so several scrapers
cost one round.

Every sample carries a ``partition`` label (contract §10; "0" for an
unpartitioned prefix): sum over it for a prefix's totals, take the max for ages.
A value Redis did not answer (an error in place of a reply) has no sample that scrape, never a 0, which would
read "empty" or "nothing waits" and silence alerts; the other replies still make theirs.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import redis as sync_redis
from prometheus_client.core import GaugeMetricFamily
from redis.exceptions import RedisClusterException, ResponseError
from prometheus_client.registry import REGISTRY, Collector, CollectorRegistry

from streams.addresses import address_seeds_now
from streams.connection import hello_facts, says_cluster
from streams.keys import NOTIFIER_GROUP, WORKERS_GROUP, Keys, partition_keys
from streams.raw import repaired
from streams.seeds import seed_urls
from streams.tenant_cap import parked_tenants_key

log = logging.getLogger(__name__)


def _clustered(probe: sync_redis.Redis) -> bool:
    """Whether ``probe``'s server is a cluster node: HELLO (any ACL user), else INFO (``@dangerous``)."""
    try:
        facts = hello_facts(probe.execute_command("HELLO"))  # type: ignore[no-untyped-call]  # no arguments: no protocol switch
    except ResponseError:
        facts = None
    return says_cluster(facts, {} if facts else probe.info("cluster"))


def _ms(entry_id: str | None) -> int | None:
    try:
        return int(str(entry_id).split("-", 1)[0]) if entry_id else None
    except ValueError:
        return None


def _next_id(entry_id: str) -> str:
    ms, _, seq = entry_id.partition("-")
    return f"{ms}-{int(seq or 0) + 1}"


class StreamGauges(Collector):
    """``streamcrew_stream_length`` (lanes, their resumed streams, results, dead, webhooks_dead), ``_group_pending``,
    ``_group_lag`` and friends, and ``streamcrew_jobs_parked`` (jobs over their tenant's cap; no tenant label: tenants are many, and the submitters')."""

    def __init__(self, redis_url: str, keys: Keys, *, partitions: int = 1, cache_s: float = 1.0) -> None:
        self.keys = keys
        self.partitions = partition_keys(keys, partitions)
        self.cache_s = cache_s
        self._url = redis_url
        self._redis: sync_redis.Redis | sync_redis.RedisCluster | None = None
        self._lock = threading.Lock()
        self._cached: list[GaugeMetricFamily] = []
        self._at = 0.0

    def streams(self) -> list[tuple[str, str, str, str]]:
        """(partition, label, key, group) of every stream with a group, in every partition."""
        return [
            (str(k.partition or 0), name, key, group)
            for k in self.partitions
            for name, key, group in [*((k.lane_name(s), s, WORKERS_GROUP) for s in k.work_streams), ("results", k.results, NOTIFIER_GROUP)]
        ]

    def _client(self) -> sync_redis.Redis | sync_redis.RedisCluster:
        """The client, made at the first scrape: a cluster client when the server says it is a cluster node.

        It starts from the first listed node that answers, as the process's own client does: redis-py, given the
        list, would ask the nodes in a random order and wait out a silent one in most scrapes' first.
        """
        if self._redis is None:
            # surrogateescape: a name or entry holding bytes that are not UTF-8 (a raw XADD, XGROUP CREATECONSUMER takes
            # any) decodes instead of failing the whole scrape with a 500 (streams.connection does the same)
            options: dict[str, Any] = {"decode_responses": True, "encoding_errors": "surrogateescape",
                                       "socket_timeout": 2, "socket_connect_timeout": 2}
            listed = seed_urls(self._url)
            # one name of several addresses (streams.addresses): each in turn, as a listed set
            seeds = (address_seeds_now(self._url) or listed) if len(listed) == 1 else listed
            for number, seed in enumerate(seeds, start=1):
                probe = sync_redis.Redis.from_url(seed, **options)
                try:
                    clustered = _clustered(probe)
                except (sync_redis.ConnectionError, sync_redis.TimeoutError):
                    if number == len(seeds):
                        raise
                    continue
                finally:
                    probe.close()
                if clustered:
                    self._redis = sync_redis.RedisCluster.from_url(seed, **options)
                else:  # a single Redis by its URL as given, not by the address that answered
                    self._redis = sync_redis.Redis.from_url(self._url if len(listed) == 1 else seed, **options)
                break
        return self._redis  # type: ignore[return-value]  # set above, or the last node's error raised

    def _forget_client(self) -> None:
        """Start the next scrape from the URL again, not from the nodes this client learnt: a whole cluster restarted on
        new addresses answers at none of them, and its name finds it again (a probe per failed scrape meanwhile)."""
        if self._redis is not None:
            with contextlib.suppress(Exception):  # closing a client whose nodes are gone must not fail the scrape
                self._redis.close()
            self._redis = None

    def describe(self) -> Iterator[GaugeMetricFamily]:
        """The names, without touching Redis (prometheus-client calls this at registration)."""
        for name in ("stream_length", "group_pending", "group_lag", "oldest_pending_age_seconds",
                     "oldest_undelivered_age_seconds", "group_consumers", "consumer_idle_seconds", "jobs_parked"):
            yield GaugeMetricFamily(f"streamcrew_{name}", "")

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._lock:
            if time.monotonic() - self._at > self.cache_s:
                try:
                    self._cached = self._read()
                except (sync_redis.RedisError, RedisClusterException) as exc:
                    log.warning("stream gauges: Redis unavailable (%s); reporting none this scrape", exc)
                    self._cached = []
                    self._forget_client()
                self._at = time.monotonic()
            yield from self._cached

    def _read(self) -> list[GaugeMetricFamily]:
        now_ms = int(time.time() * 1000)
        streams = self.streams()
        redis = self._client()
        pipe = redis.pipeline(transaction=False)
        for _, _, key, group in streams:
            pipe.xlen(key)
            pipe.xinfo_groups(key)
            pipe.xpending(key, group)
            pipe.xinfo_consumers(key, group)
        for k in self.partitions:
            pipe.xlen(k.dead)
            pipe.xlen(k.webhooks_dead)
            pipe.hvals(parked_tenants_key(k))
        replies: list[Any] = pipe.execute(raise_on_error=False)

        length = GaugeMetricFamily("streamcrew_stream_length", "Entries in the stream", labels=["stream", "partition"])
        pending = GaugeMetricFamily("streamcrew_group_pending", "Entries delivered and not yet acknowledged", labels=["stream", "group", "partition"])
        lag = GaugeMetricFamily("streamcrew_group_lag", "Entries not yet delivered to the group (Redis >= 7)", labels=["stream", "group", "partition"])
        oldest_pending = GaugeMetricFamily("streamcrew_oldest_pending_age_seconds", "Age (since it was added) of the oldest entry claimed and not yet acknowledged", labels=["stream", "group", "partition"])
        oldest_waiting = GaugeMetricFamily("streamcrew_oldest_undelivered_age_seconds", "Age of the oldest entry not yet delivered", labels=["stream", "group", "partition"])
        consumers = GaugeMetricFamily("streamcrew_group_consumers", "Consumers in the group", labels=["stream", "group", "partition"])
        idle = GaugeMetricFamily("streamcrew_consumer_idle_seconds", "Seconds since the consumer last read", labels=["stream", "group", "consumer", "partition"])
        parked = GaugeMetricFamily("streamcrew_jobs_parked", "Jobs waiting over their tenant's STREAMCREW_TENANT_MAX_RUNNING", labels=["partition"])

        lookups: list[tuple[int, str]] = []
        for i, (part, name, _key, group) in enumerate(streams):
            xlen, groups, summary, members = replies[4 * i : 4 * i + 4]
            if not isinstance(xlen, Exception):
                length.add_metric([name, part], int(xlen))
            info = next((g for g in groups if g.get("name") == group), None) if isinstance(groups, list) else None
            if info is None:
                continue
            labels = [name, group, part]
            pending.add_metric(labels, int(info["pending"]))
            if info.get("lag") is not None:
                lag.add_metric(labels, int(info["lag"]))
            if isinstance(summary, dict):
                first = _ms(summary.get("min"))
                oldest_pending.add_metric(labels, max(0.0, (now_ms - first) / 1000) if first else 0.0)
            if isinstance(members, list):
                consumers.add_metric(labels, len(members))
                for c in members:
                    idle.add_metric([name, group, repaired(str(c["name"])), part], int(c["idle"]) / 1000)  # a label is UTF-8
            lookups.append((i, str(info.get("last-delivered-id") or "0-0")))

        pipe = redis.pipeline(transaction=False)
        for i, last in lookups:
            pipe.xrange(streams[i][2], min=_next_id(last), count=1)
        for (i, _), first_waiting in zip(lookups, pipe.execute(raise_on_error=False) if lookups else [], strict=True):
            part, name, _key, group = streams[i]
            if isinstance(first_waiting, Exception):
                continue
            first = _ms(first_waiting[0][0]) if isinstance(first_waiting, list) and first_waiting else None
            oldest_waiting.add_metric([name, group, part], max(0.0, (now_ms - first) / 1000) if first else 0.0)

        tail = replies[4 * len(streams):]
        for j, k in enumerate(self.partitions):
            part = str(k.partition or 0)
            for name, n in (("dead", tail[3 * j]), ("webhooks_dead", tail[3 * j + 1])):
                if not isinstance(n, Exception):
                    length.add_metric([name, part], int(n))
            if isinstance(counts := tail[3 * j + 2], list):
                parked.add_metric([part], sum(int(n) for n in counts))
        return [length, pending, lag, oldest_pending, oldest_waiting, consumers, idle, parked]


_registered: set[tuple[str, str]] = set()


def register_stream_gauges(redis_url: str, keys: Keys, registry: CollectorRegistry = REGISTRY, *, partitions: int = 1) -> None:
    """Add the gauges of every partition to ``registry`` once per (Redis, prefix) in this process."""
    if (redis_url, keys.prefix) in _registered:
        return
    registry.register(StreamGauges(redis_url, keys, partitions=partitions))
    _registered.add((redis_url, keys.prefix))
