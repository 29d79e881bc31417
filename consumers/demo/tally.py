"""Live figures of a demo run, read from the results stream, the queue stats and the workers' /metrics."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis

from consumers.monitor import depth
from streams.envelope import JobResult
from streams.keys import Keys, partition_keys
from streams.partition_stats import partitioned_queue_stats

SAMPLE_AGENTS = ("support", "order", "returns", "product")


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": 0.0, "p95": 0.0, "p99": 0.0}
    if len(values) == 1:
        return {"p50": values[0], "p95": values[0], "p99": values[0]}
    qs = statistics.quantiles(values, n=100, method="inclusive")
    return {"p50": round(qs[49], 1), "p95": round(qs[94], 1), "p99": round(qs[98], 1)}


@dataclass
class Tally:
    """Everything the live view and the report show; ``poll()`` brings it up to date."""

    redis: Redis
    keys: Keys
    metrics_urls: list[str]
    partitions: int = 1
    ids: Counter[str] = field(default_factory=Counter)
    statuses: Counter[str] = field(default_factory=Counter)
    waits_ms: list[float] = field(default_factory=list)
    runs_ms: list[float] = field(default_factory=list)
    tokens: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    cost_usd: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    offline: bool = False
    retries: int = 0
    samples: list[dict[str, Any]] = field(default_factory=list)
    backlog: dict[str, int] = field(default_factory=dict)
    in_flight: int = 0
    dead_letters: int = 0
    reclaims: int = 0
    workflows: Counter[str] = field(default_factory=Counter)
    step_ids: Counter[str] = field(default_factory=Counter)
    _last_ids: dict[str, str] = field(default_factory=dict)  # results stream -> last entry read
    _scraped: dict[str, float] = field(default_factory=dict)

    @property
    def results(self) -> int:
        return sum(self.ids.values())

    async def poll(self, http: httpx.AsyncClient) -> None:
        for results in (k.results for k in partition_keys(self.keys, self.partitions)):
            while True:
                reply = await self.redis.xread({results: self._last_ids.get(results, "0")}, count=1000)
                if not reply:
                    break
                for eid, fields in reply[0][1]:
                    self._last_ids[results] = eid
                    self._add(JobResult.from_fields(fields))
        # the tally reads every result itself, so no window figures
        stats = await partitioned_queue_stats(self.redis, self.keys, self.partitions, window=None)
        self.backlog = depth(stats)
        self.in_flight = sum(int(lane["pending"]) for lane in stats["lanes"].values())
        self.dead_letters = int(stats["dead_letters"])
        for url in self.metrics_urls:
            try:
                response = await http.get(url, timeout=1.0)
                response.raise_for_status()
                scraped = sum(s.value for f in text_string_to_metric_families(response.text)
                              for s in f.samples if s.name == "streamcrew_reclaimed_total")
            except (httpx.HTTPError, ValueError):
                # a killed worker, or its freed port now another process's (an error page, not metrics): keep its last figures
                continue
            self._scraped[url] = scraped
        self.reclaims = int(sum(self._scraped.values()))

    def _add(self, r: JobResult) -> None:
        if r.parent:  # a workflow's step: its own event, but not one of the requests sent
            self.step_ids[r.id] += 1
            self._add_usage(r)
            return
        if r.agent == "workflow":
            self.workflows[str(r.status)] += 1
        self.ids[r.id] += 1
        self.statuses[str(r.status)] += 1
        self.retries += max(0, r.attempts - 1)
        if r.started_at and r.submitted_at:
            self.waits_ms.append(float(r.started_at - r.submitted_at))
        if r.finished_at and r.started_at:
            self.runs_ms.append(float(r.finished_at - r.started_at))
        if r.agent != "workflow":  # a workflow's usage is its steps' sum, counted with the steps
            self._add_usage(r)
        if r.status == "completed" and r.agent in SAMPLE_AGENTS and len(self.samples) < 3 and all(s["agent"] != r.agent for s in self.samples):
            self.samples.append(r.to_json_dict())

    def _add_usage(self, r: JobResult) -> None:
        if r.usage:
            model = str(r.usage.get("model", "?"))
            self.tokens[model] += int(r.usage.get("prompt_tokens", 0)) + int(r.usage.get("completion_tokens", 0))
            if r.usage.get("cost_usd") is not None:
                self.cost_usd[model] += float(r.usage["cost_usd"])
            self.offline = self.offline or bool(r.usage.get("offline"))
