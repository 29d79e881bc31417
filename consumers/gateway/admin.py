"""Queue-wide operator endpoints: GET /queue/stats, GET /dead, POST /dead/{entry_id}/replay."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query
from pydantic import ValidationError
from starlette.responses import Response

from consumers.gateway.auth import Caller, require_operator
from consumers.gateway.errors import ApiError
from consumers.gateway.models import DeadLetterPage, QueueStats, Replayed
from consumers.gateway.responses import AUTH_ERRORS, errors, job_links, json_response
from consumers.gateway.state import GatewayState, gateway_state
from streams import dead
from streams.errors import DeadLetterNotFound, StreamcrewError
from streams.partition_stats import partitioned_queue_stats
from streams.window import DEFAULT_WINDOW, MAX_WINDOW

router = APIRouter(tags=["operations"])
State = Annotated[GatewayState, Depends(gateway_state)]
Operator = Annotated[Caller, Depends(require_operator)]
EntryId = Annotated[str, Path(pattern=dead.DEAD_ENTRY_PATTERN,
                              description="dead letter's entry_id: its entry ID, e.g. 1700000000000-0, then :<partition> with partitions")]


@router.get("/queue/stats", response_model=QueueStats, summary="Queue figures", responses=errors(403, *AUTH_ERRORS))
async def get_queue_stats(
    state: State, _: Operator,
    window: Annotated[int, Query(ge=1, le=MAX_WINDOW, description="how many of the latest results the figures cover")] = DEFAULT_WINDOW,
) -> Response:
    """Per lane: length, pending, lag, oldest pending age, consumers and their idle times; the results
    stream; dead letters and retries; over the last ``window`` results: outcomes, latency and queue-wait
    percentiles, tokens and cost, per model and per tenant. The same figures as ``streamcrew stats --json``.
    Queue-wide, so only for keys not bound to a tenant."""
    return json_response(200, await partitioned_queue_stats(state.redis, state.keys, state.settings.partitions, window=window))


@router.get("/dead", response_model=DeadLetterPage, summary="List dead letters", responses=errors(403, *AUTH_ERRORS))
async def list_dead_letters(
    state: State, _: Operator,
    count: Annotated[int, Query(ge=1, le=1000, description="page size")] = 100,
    after: Annotated[str | None, Query(pattern=dead.DEAD_ENTRY_PATTERN, description="entry_id the previous page ended with")] = None,
) -> Response:
    """Dead letters, oldest first, a page at a time (of every partition, merged)."""
    letters = await dead.list_dead(state.redis, state.keys, count=count, after=after, partitions=state.settings.partitions)
    page = [letter.model_dump(mode="json") for letter in letters]
    next_after = letters[-1].entry_id if len(letters) == count else None
    return json_response(200, {"dead_letters": page, "next_after": next_after})


@router.post(
    "/dead/{entry_id}/replay", status_code=202, response_model=Replayed, summary="Replay a dead letter",
    responses=errors(403, 404, 409, *AUTH_ERRORS),
)
async def replay_dead_letter(entry_id: EntryId, state: State, _: Operator) -> Response:
    """Send the dead letter's job back to its lane with a fresh attempt budget (the job keeps its id)."""
    try:
        job_id, name = await dead.replay(state.redis, state.keys, entry_id, partitions=state.settings.partitions)
    except DeadLetterNotFound:
        raise ApiError(404, "dead_letter_not_found", f"no dead letter {entry_id}") from None
    except (StreamcrewError, ValidationError) as exc:
        raise ApiError(409, "cannot_replay", str(exc).splitlines()[0]) from None
    return json_response(202, {"entry_id": name, "job_id": job_id, "status": "queued", "links": job_links(job_id)})
