"""The gateway's own request metrics and the /metrics body (stream gauges: ``streams.gauges``)."""

from __future__ import annotations

import logging
import time
from functools import cache

from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, Histogram, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send


log = logging.getLogger("streamcrew.gateway")

UNMATCHED = "<unmatched>"
# FastAPI's own pages (served without keys): plain Starlette routes, which set no scope["route"] to read the template from.
DOC_PAGES = frozenset({"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"})
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
REQUESTS = Counter("streamcrew_http_requests_total", "HTTP requests answered by the gateway", ["method", "route", "status"])
DURATION = Histogram(
    "streamcrew_http_request_duration_seconds", "Time to answer an HTTP request (event streams: their whole life)",
    ["method", "route"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
)
# Summed over callers (a per-key label would name keys): what STREAMCREW_MAX_EVENT_STREAMS_PER_KEY is sized against.
EVENT_STREAMS = Gauge("streamcrew_http_event_streams", "Event streams (GET /jobs/{id}/events) open now in this gateway process")


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
            route = getattr(scope.get("route"), "path", None) or (scope["path"] if scope["path"] in DOC_PAGES and status != 404 else UNMATCHED)
            method = scope["method"] if scope["method"] in METHODS else "OTHER"
            _requests(method, route, status).inc()
            _duration(method, route).observe(time.perf_counter() - start)


def render() -> tuple[bytes, str]:
    return generate_latest(), CONTENT_TYPE_LATEST
