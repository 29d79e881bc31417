"""/healthz (the process answers), /readyz (Redis answers PING in time), /metrics."""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated

from fastapi import APIRouter, Depends
from redis.exceptions import RedisError
from starlette.responses import Response

from consumers.gateway.auth import Caller, authorize
from consumers.gateway.metrics import render
from consumers.gateway.models import Health
from consumers.gateway.responses import AUTH_ERRORS, errors, json_response
from consumers.gateway.state import GatewayState, gateway_state

router = APIRouter(tags=["health"])
log = logging.getLogger("streamcrew.gateway")
State = Annotated[GatewayState, Depends(gateway_state)]


@router.get("/healthz", response_model=Health, summary="Liveness")
async def healthz() -> Response:
    """200 while the process serves requests; never touches Redis."""
    return json_response(200, {"status": "ok"})


@router.get("/readyz", response_model=Health, summary="Readiness", responses=errors(503))
async def readyz(state: State) -> Response:
    """200 when Redis answers PING within ``ready_timeout_s``; 503 otherwise."""
    try:
        await asyncio.wait_for(state.redis.ping(), state.settings.ready_timeout_s)
    except (RedisError, OSError, TimeoutError) as exc:
        reason = type(exc).__name__ if isinstance(exc, TimeoutError) else str(exc) or type(exc).__name__
        return json_response(503, {"error": {"code": "not_ready", "message": f"Redis does not answer: {reason}"}},
                             headers={"Retry-After": "1"})
    return json_response(200, {"status": "ready"})


@router.get(
    "/metrics", summary="Prometheus metrics", response_class=Response,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}, "description": "Prometheus text format"},
               **errors(*AUTH_ERRORS, json_route=False)},
)
async def metrics(state: State, _: Annotated[Caller, Depends(authorize)]) -> Response:
    """The gateway's request metrics and the stream gauges (read from Redis at scrape time, off the event loop)."""
    body, content_type = await asyncio.to_thread(render)
    return Response(body, media_type=content_type)
