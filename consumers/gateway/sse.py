"""GET /jobs/{job_id}/events: the job's status changes as Server-Sent Events, until it ends.

The gateway keeps no history: it polls the job record's head (every ``sse_poll_s``,
backing off to ``sse_poll_max_s`` while nothing changes: status, attempts, steps
settled and tenant, streams.records.JobHead) and sends an event whenever the
record's *state* changes; only then is the whole record read (its result parsed,
a workflow's steps listed), for the event. An event's id names that state,
``<attempts>-<status>`` (``0-queued``, ``1-running``, ``1-retrying``,
``2-running``, ``2-completed``), so it is the same whichever replica sends it. A workflow's
state also counts its settled steps (``1-running-3``), so each step's end is an event.
A client that reconnects with ``Last-Event-ID`` gets the current state only if
it differs from the one it last saw; a client that already saw the terminal
state gets 204, which tells an EventSource to stop reconnecting.
Each caller may hold ``max_event_streams_per_key`` streams open per process (429 above), since each one polls.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query
from fastapi.sse import EventSourceResponse, ServerSentEvent
from redis.exceptions import RedisError

from consumers.gateway.auth import Caller, authorize
from consumers.gateway.deadline import answered_within
from consumers.gateway.errors import ApiError
from consumers.gateway.jobs import JobIdPath, parse_turn, sees, visible_head, visible_job
from consumers.gateway.responses import AUTH_ERRORS, errors, job_view
from consumers.gateway.state import GatewayState, gateway_state
from streams.outage import REDIS_DOWN
from streams.records import JobHead, JobRecord, get_job, get_job_head
from streams.strict_json import json_bytes

router = APIRouter(tags=["jobs"])
RETRY_MS = 1000
LAST_EVENT_ID = "id of the last event received (EventSource sends it when it reconnects)"
LAST_EVENT_ID_QUERY = "the same as Last-Event-ID, for clients that cannot set headers"
# A slot frees when one of the caller's streams ends (its job ended, STREAMCREW_SSE_MAX_S passed, the client hung
# up); when is unknown, so a short fixed wait.
STREAMS_FULL_RETRY_S = 5
STREAMS_FULL: dict[int | str, dict[str, Any]] = {
    429: {**errors(429, json_route=False)[429],
          "description": "rate limit exceeded, or the caller's open event streams are at the cap; see Retry-After"}}


def event_id(record: JobRecord | JobHead) -> str:
    if record.steps_total is not None:  # a workflow: each settled step is progress worth an event
        return f"{record.attempts}-{record.status}-{record.steps_done or 0}"
    return f"{record.attempts}-{record.status}"


class NothingNew(ApiError):
    """The client already saw this job's terminal state: 204, so an EventSource stops reconnecting."""

    def __init__(self) -> None:
        super().__init__(204, "", "")


async def _resume_point(
    job_id: JobIdPath,
    state: Annotated[GatewayState, Depends(gateway_state)],
    caller: Annotated[Caller, Depends(authorize)],
    last_event_id: Annotated[str | None, Header(max_length=200, description=LAST_EVENT_ID)] = None,
    last_event_id_query: Annotated[str | None, Query(alias="last_event_id", max_length=200, description=LAST_EVENT_ID_QUERY)] = None,
) -> tuple[JobRecord | JobHead, str | None]:
    """Runs before the stream opens, so an unknown job is a plain 404, and a Redis that does not answer within
    STREAMCREW_REQUEST_TIMEOUT_S a 503 (the middleware's deadline leaves event streams out). The whole record is
    read only when its state is one the client has not seen: the first event carries it."""
    seen = last_event_id or last_event_id_query
    record = await answered_within(state.settings.request_timeout_s, _unseen(state, caller, job_id, seen))
    if record.terminal and seen == event_id(record):
        raise NothingNew
    return record, seen


async def _unseen(state: GatewayState, caller: Caller, job_id: str, seen: str | None) -> JobRecord | JobHead:
    """The job's head while its state is ``seen``, else its whole record (an event to send); 404 when not visible."""
    head = await visible_head(state, caller, job_id)
    return head if event_id(head) == seen else await visible_job(state, caller, job_id, head_seen=True)


async def _stream_slot(
    state: Annotated[GatewayState, Depends(gateway_state)],
    caller: Annotated[Caller, Depends(authorize)],
    start: Annotated[tuple[JobRecord | JobHead, str | None], Depends(_resume_point)],
) -> AsyncIterator[tuple[JobRecord | JobHead, str | None]]:
    """After the 404 and 204 checks, one of the caller's stream slots (429 when none is free), held until the
    response is over: FastAPI leaves a yield dependency once the stream ended or the client went away."""
    if not state.streams.take(caller.bucket):
        who = "API key" if state.keyring.enabled else "client address"
        raise ApiError(429, "too_many_streams",
                       f"this {who} is at its cap of {state.streams.per_caller} open event streams on this gateway "
                       f"(STREAMCREW_MAX_EVENT_STREAMS_PER_KEY); close one, or retry after {STREAMS_FULL_RETRY_S}s",
                       headers={"Retry-After": str(STREAMS_FULL_RETRY_S)})
    try:
        yield start
    finally:
        state.streams.give_back(caller.bucket)


# Line breaks to str.splitlines() that JSON leaves unescaped: FastAPI's SSE writer split data lines on them in
# releases pyproject allows (a line break inside a JSON string, which the client's JSON.parse refused).
_SPLITTERS = str.maketrans({"\u2028": "\\u2028", "\u2029": "\\u2029", "\x85": "\\u0085"})


def sse_json(body: dict[str, Any]) -> str:
    """``body`` as one line of JSON for an event's data."""
    return json_bytes(body).decode().translate(_SPLITTERS)


@router.get(
    "/jobs/{job_id}/events", response_class=EventSourceResponse, summary="Stream a job's status changes",
    responses={204: {"description": "Last-Event-ID is the job's terminal state: nothing more will come"},
               **errors(404, *AUTH_ERRORS, json_route=False), **STREAMS_FULL},
)
async def job_events(
    job_id: JobIdPath,
    state: Annotated[GatewayState, Depends(gateway_state)],
    start: Annotated[tuple[JobRecord | JobHead, str | None], Depends(_stream_slot)],
    caller: Annotated[Caller, Depends(authorize)],
) -> AsyncIterator[ServerSentEvent]:
    """``event: status`` with the status record as data, one per state change; the stream ends after the
    terminal state. Reconnect with ``Last-Event-ID`` to resume."""
    record, last = start
    settings = state.settings
    closes_at = time.monotonic() + settings.sse_max_s
    delay = settings.sse_poll_s
    first = True
    while True:
        current = event_id(record)
        if current != last:
            assert isinstance(record, JobRecord)  # a head is kept only while its state is the one last sent
            yield ServerSentEvent(event="status", id=current, raw_data=sse_json(job_view(record)), retry=RETRY_MS if first else None)
            last, first, delay = current, False, settings.sse_poll_s
        if record.terminal or time.monotonic() >= closes_at:
            return
        await asyncio.sleep(delay)
        delay = min(delay * 1.5, settings.sse_poll_max_s)
        try:  # under the first read's deadline: a hung Redis held the stream past its close (~45 s a poll)
            async with asyncio.timeout(settings.request_timeout_s):
                polled: JobRecord | JobHead | None = await get_job_head(state.redis, state.keys, job_id, partitions=settings.partitions)
                if polled is not None and sees(caller, polled) and event_id(polled) != last:
                    polled = await get_job(state.redis, state.keys, job_id, partitions=settings.partitions,
                                           turn=parse_turn(state, caller))  # for the event
        except (RedisError, TimeoutError, *REDIS_DOWN):  # Redis away or hung (a cluster's "no node answers" too): keep the stream, look again later
            delay = settings.sse_poll_max_s
            continue
        except ApiError:  # its large result's parse refused its turn (too_many_large_results): this key's other reads first
            delay = settings.sse_poll_max_s
            continue
        # The tenant is checked on every poll: the record may have expired and been created again by another
        # tenant under the same id while this stream was open.
        if polled is None or not sees(caller, polled):
            yield ServerSentEvent(event="error", data={"error": {"code": "job_not_found", "message": f"job {job_id!r} expired"}})
            return
        record = polled
