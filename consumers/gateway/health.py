"""/healthz (the process answers), /readyz (Redis answers PING in time), /metrics."""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated

from fastapi import APIRouter, Depends
from redis.exceptions import RedisError
from starlette.responses import Response

from consumers.gateway.auth import Caller, require_operator
from consumers.gateway.metrics import render
from consumers.gateway.models import Health
from consumers.gateway.responses import AUTH_ERRORS, errors, json_response
from consumers.gateway.state import GatewayState, gateway_state

router = APIRouter(tags=["health"])
log = logging.getLogger("streamcrew.gateway")
State = Annotated[GatewayState, Depends(gateway_state)]


# HEAD as well: load balancers and uptime checkers probe with it (a 405 read as "down"); the schema lists the GET
@router.head("/healthz", include_in_schema=False)
@router.get("/healthz", response_model=Health, summary="Liveness")
async def healthz() -> Response:
    """200 while the process serves requests; never touches Redis."""
    return json_response(200, {"status": "ok"})


@router.head("/readyz", include_in_schema=False)
@router.get("/readyz", response_model=Health, summary="Readiness", responses=errors(503))
async def readyz(state: State) -> Response:
    """200 when Redis answers PING within ``ready_timeout_s``; 503 otherwise."""
    try:
        await asyncio.wait_for(state.redis.ping(), state.settings.ready_timeout_s)
    except (RedisError, OSError, TimeoutError) as exc:
        # The route needs no key: name the kind of failure only, never the Redis address (it goes to the log).
        log.warning("readyz: Redis does not answer: %s", exc)
        return json_response(503, {"error": {"code": "not_ready", "message": f"Redis does not answer ({type(exc).__name__})"}},
                             headers={"Retry-After": "1"})
    return json_response(200, {"status": "ready"})


@router.get(
    "/metrics", summary="Prometheus metrics", response_class=Response,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}, "description": "Prometheus text format"},
               **errors(403, *AUTH_ERRORS, json_route=False)},
)
async def metrics(state: State, _: Annotated[Caller, Depends(require_operator)]) -> Response:
    """The gateway's request metrics and the stream gauges (read from Redis at scrape time, off the event loop).
    Queue-wide, so a tenant-bound key gets 403, as for ``/queue/stats``."""
    body, content_type = await asyncio.to_thread(render)
    return Response(body, media_type=content_type)
