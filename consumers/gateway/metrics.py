"""The gateway's own request metrics, the stream gauges of contract §8, and the /metrics body."""

from __future__ import annotations

import logging
import time
from functools import cache

from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, Histogram, generate_latest
from redis.asyncio import Redis
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from streams.keys import Keys
from streams.stats import queue_stats

log = logging.getLogger("streamcrew.gateway")

UNMATCHED = "<unmatched>"
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
REQUESTS = Counter("streamcrew_http_requests_total", "HTTP requests answered by the gateway", ["method", "route", "status"])
DURATION = Histogram(
    "streamcrew_http_request_duration_seconds", "Time to answer an HTTP request (event streams: their whole life)",
    ["method", "route"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
)
STREAM_LENGTH = Gauge("streamcrew_stream_length", "Entries in a stream", ["stream"])
GROUP_PENDING = Gauge("streamcrew_group_pending", "Entries delivered to a group and not yet acknowledged", ["stream", "group"])
GROUP_LAG = Gauge("streamcrew_group_lag", "Entries not yet delivered to a group (Redis >= 7)", ["stream", "group"])


@cache
def _requests(method: str, route: str, status: int) -> Counter:
    return REQUESTS.labels(method=method, route=route, status=str(status))


@cache
def _duration(method: str, route: str) -> Histogram:
    return DURATION.labels(method=method, route=route)


class RequestMetrics:
    """Counts and times every HTTP request by route template (``/jobs/{id}``), never by raw path."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def recording(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, recording)
        finally:
            route = getattr(scope.get("route"), "path", None) or UNMATCHED
            method = scope["method"] if scope["method"] in METHODS else "OTHER"
            _requests(method, route, status).inc()
            _duration(method, route).observe(time.perf_counter() - start)


async def refresh_stream_gauges(redis: Redis, keys: Keys) -> None:
    """Set the stream gauges from one round of ``queue_stats`` (done on each scrape)."""
    figures = await queue_stats(redis, keys)
    streams = [*figures["lanes"].values(), figures["results"]]
    for s in streams:
        STREAM_LENGTH.labels(stream=s["stream"]).set(s["length"])
        GROUP_PENDING.labels(stream=s["stream"], group=s["group"]).set(s["pending"])
        if s["lag"] is not None:
            GROUP_LAG.labels(stream=s["stream"], group=s["group"]).set(s["lag"])
    STREAM_LENGTH.labels(stream=keys.dead).set(figures["dead_letters"])
    STREAM_LENGTH.labels(stream=keys.webhooks_dead).set(figures["webhooks"]["dead_letters"])


def render() -> tuple[bytes, str]:
    return generate_latest(), CONTENT_TYPE_LATEST
