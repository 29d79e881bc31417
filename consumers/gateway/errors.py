"""Every error the gateway answers has one JSON shape: ``{"error": {"code", "message"}}``.

ApiError                 raised by routes and dependencies; carries status, code, message, headers
handlers for             FastAPI's RequestValidationError (422), Starlette's HTTPException (404, 405, ...),
                         Redis connection errors and a cluster's failover answers (503)
LastResort               middleware: anything else is 500, logged once; a client that hung up is 499, not logged
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel
from redis.exceptions import ClusterDownError, ClusterError, ReadOnlyError, RedisClusterException, SlotNotCoveredError
from redis.exceptions import OutOfMemoryError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from consumers.gateway.models import NAME_PATTERN
from streams.outage import WritesHeldBack
from streams.sizes import short

log = logging.getLogger("streamcrew.gateway")

MAX_DETAILS = 20
CLIENT_CLOSED = 499  # nginx's "client closed request": the client hung up before its answer

# Redis is there but cannot serve the call for a few seconds: unreachable, or a Cluster in a failover
# (CLUSTERDOWN, TRYAGAIN, redirections past redis-py's limit, a write that reached a demoted master), or
# taking no writes for now (OOM, NOREPLICAS, MISCONF, BUSY). Each is answered 503 with Retry-After, never 500.
REDIS_UNAVAILABLE: tuple[type[Exception], ...] = (
    RedisConnectionError, RedisTimeoutError, ClusterDownError, TryAgainError, ClusterError, ReadOnlyError, OutOfMemoryError,
    WritesHeldBack)


class ErrorBody(BaseModel):
    code: str
    message: str
    details: list[dict[str, Any]] | None = None


class ErrorResponse(BaseModel):
    """The body of every 4xx and 5xx answer."""

    error: ErrorBody


class ApiError(Exception):
    """An answer other than success, raised anywhere below a route."""

    def __init__(self, status: int, code: str, message: str, *, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})


def error_response(status: int, code: str, message: str, *, headers: Mapping[str, str] | None = None,
                   details: Sequence[dict[str, Any]] | None = None) -> Response:
    body: dict[str, Any] = {"code": code, "message": message}
    if details:
        body["details"] = list(details)
    return Response(orjson.dumps({"error": body}), status_code=status, media_type="application/json", headers=headers)


def _code_for(status: int) -> str:
    try:
        return HTTPStatus(status).phrase.lower().replace(" ", "_").replace("-", "_")
    except ValueError:
        return "error"


def _where(loc: Sequence[Any]) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:] if len(parts) > 1 else parts
    return ".".join(parts) or "body"


def describe_validation(exc: RequestValidationError) -> tuple[str, list[dict[str, Any]]]:
    """One readable sentence naming each bad field, and the structured list."""
    details = []
    for err in exc.errors()[:MAX_DETAILS]:
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        if err.get("type") == "string_pattern_mismatch" and (err.get("ctx") or {}).get("pattern") == NAME_PATTERN:
            msg = "must not contain whitespace or control characters"  # said in words, not as the regex
        details.append({"field": _where(err.get("loc", ())), "message": msg, "type": str(err.get("type", ""))})
    message = "; ".join(f"{d['field']}: {d['message']}" for d in details) or "invalid request"
    return message, details


async def _api_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    if exc.status == 204:
        return Response(status_code=204, headers=exc.headers)
    return error_response(exc.status, exc.code, exc.message, headers=exc.headers)


async def _validation_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    message, details = describe_validation(exc)
    return error_response(422, "invalid_request", message, details=details)


async def _http_error(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    status = exc.status_code
    if status in (204, 304) or status < 200:
        return Response(status_code=status, headers=exc.headers)
    message = exc.detail if isinstance(exc.detail, str) else HTTPStatus(status).phrase
    code = getattr(exc, "error_code", None) or _code_for(status)
    return error_response(status, code, message, headers=exc.headers)


def redis_unavailable(message: str) -> Response:
    """The 503 for a Redis that cannot serve the call now: the client should retry in a second."""
    return error_response(503, "redis_unavailable", message, headers={"Retry-After": "1"})


async def _redis_down(_: Request, exc: Exception) -> Response:
    log.warning("redis unavailable: %s", exc)
    return redis_unavailable("the job store (Redis) cannot serve this now (unreachable, out of memory or taking no writes "
                             "for now, or a cluster failing over or moving this job's partition); retry later")


async def _cluster_client_error(request: Request, exc: Exception) -> Response:
    """The cluster client's own errors: 503 when it found no node to ask or no master for a slot, else 500."""
    if isinstance(exc.__cause__, REDIS_UNAVAILABLE) or isinstance(exc, SlotNotCoveredError):
        return await _redis_down(request, exc)
    return await _unexpected(request, exc)


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, short(request.url.path), exc_info=exc)
    return error_response(500, "internal_error", "internal server error")


class LastResort:
    """Answers what no handler took: an unexpected error is a 500, logged once; a client that hung up
    mid-request (ClientDisconnect) is no error. Not an ``Exception`` handler: Starlette re-raises after
    one answers, so uvicorn logged every 500 a second time ("Exception in ASGI application")."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except ClientDisconnect:
            log.debug("client went away during %s %s", scope["method"], scope["path"])
            if not started:  # the server drops it; the request metrics count it as 499, not as a 500
                await error_response(CLIENT_CLOSED, "client_closed_request", "the client went away")(scope, receive, send)
        except Exception as exc:
            if started:  # too late to answer: uvicorn logs it, once, and closes the connection
                raise
            await (await _unexpected(Request(scope), exc))(scope, receive, send)


def install(app: FastAPI) -> None:
    """Register the handlers that give every error the shared shape.

    Call it before adding other middleware: LastResort must be the innermost, so its 500s and 499s
    pass the CORS headers and the request metrics like any answer.
    """
    app.add_middleware(LastResort)
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    for unavailable in REDIS_UNAVAILABLE:
        app.add_exception_handler(unavailable, _redis_down)
    app.add_exception_handler(RedisClusterException, _cluster_client_error)
