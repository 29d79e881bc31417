"""The FastAPI application: one Redis client for the process, the routers, the middleware."""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from redis.asyncio import Redis
from starlette.responses import Response

from consumers.gateway import admin, deadletters, errors, health, jobs, sse, tasks
from consumers.gateway.auth import authorize
from consumers.gateway.deadline import AnswerDeadline
from consumers.gateway.limits import BodyLimit
from consumers.gateway.metrics import RequestMetrics
from consumers.gateway.responses import json_response
from consumers.gateway.settings import GatewaySettings
from consumers.gateway.state import GatewayState
from streams.connection import connect_when_reachable
from streams.gauges import register_stream_gauges
from streams.keys import Keys
from streams.layout import hold_layout
from streams.outage import quiet_cluster_refresh_errors

log = logging.getLogger("streamcrew.gateway")

DESCRIPTION = """Submit LLM agent jobs and follow them: `POST /jobs` answers at once (202 and a job id);
poll `GET /jobs/{job_id}`, wait on `GET /jobs/{job_id}/result`, stream `GET /jobs/{job_id}/events`, or let the
notifier call your webhook. Errors are `{"error": {"code", "message"}}`."""
# Every method a route answers (DELETE: purging dead letters), so a browser app may call each; HEAD: the health checks.
CORS_METHODS = ["GET", "HEAD", "POST", "DELETE"]


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` (the address the gateway binds) is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name other than localhost: it may resolve to any interface


def create_app(settings: GatewaySettings, redis: Redis | None = None) -> FastAPI:
    """The gateway app; with ``redis`` given it uses (and does not close) that client."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        quiet_cluster_refresh_errors()  # also when another ASGI server runs the app, not `streamcrew gateway`
        client = redis if redis is not None else await connect_when_reachable(settings.effective_redis_url, "gateway start")
        await hold_layout("gateway start", client, Keys(settings.prefix), settings.partitions)
        app.state.gateway = GatewayState.build(settings, client)
        register_stream_gauges(settings.effective_redis_url, Keys(settings.prefix), partitions=settings.partitions)
        log.info("gateway on %s:%d, prefix %r, auth %s, rate limit %s", settings.host, settings.port, settings.prefix,
                 "on" if settings.api_keys else "off",
                 f"{settings.rate_limit_per_s}/s burst {settings.effective_burst}" if settings.rate_limit_per_s else "off")
        if not settings.api_keys and not is_loopback_host(settings.host):
            log.warning("the gateway listens on %s without API keys: anyone who reaches that address can submit jobs, "
                        "read every job and replay or purge dead letters; set STREAMCREW_API_KEYS", settings.host)
        try:
            yield
        finally:
            if redis is None:
                await client.aclose()

    # FastAPI's built-in OpenTelemetry hooks are off: they look up providers on every request, and the
    # gateway exports its own Prometheus metrics; trace context travels to the worker as ``traceparent``.
    # With keys on, the OpenAPI document needs one like every other route, and /docs and /redoc are off:
    # the pages they serve fetch it without one.
    open_docs = not settings.api_keys
    app = FastAPI(title="streamcrew gateway", version="0.1.0", description=DESCRIPTION, lifespan=lifespan,
                  telemetry={"tracing": False, "metrics": False, "logs": False, "operation_spans": False},
                  openapi_url="/openapi.json" if open_docs else None,
                  docs_url="/docs" if open_docs else None, redoc_url="/redoc" if open_docs else None)
    errors.install(app)  # first: its middleware is the innermost
    for module in (jobs, tasks, sse, admin, deadletters, health):
        app.include_router(module.router)
    if not open_docs:
        app.add_api_route("/openapi.json", _openapi, include_in_schema=False, dependencies=[Depends(authorize)])
    # Raw ASGI middleware (not BaseHTTPMiddleware): it costs microseconds on the hot path.
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(AnswerDeadline, seconds=settings.request_timeout_s)  # its 503 passes CORS and the metrics
    if settings.cors_origins:  # browser apps calling the gateway directly
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=CORS_METHODS,
                           allow_headers=["Authorization", "Content-Type", "Last-Event-ID", "traceparent"],
                           expose_headers=["Location", "Retry-After"], max_age=600)
    app.add_middleware(RequestMetrics)
    return app


async def _openapi(request: Request) -> Response:
    return json_response(200, request.app.openapi())
