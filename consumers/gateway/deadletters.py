"""Bulk dead-letter endpoints and webhook dead letters, for operators (keys not bound to a tenant).

``DELETE /dead`` and ``POST /dead/replay`` do over HTTP what ``streamcrew dead purge`` and
``streamcrew dead replay --all`` do; ``/webhooks/dead`` what ``streamcrew webhooks dead`` does.
"""

from __future__ import annotations

import logging
from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, Field
from starlette.responses import Response

from consumers.gateway.admin import Operator, State
from consumers.gateway.errors import ApiError, ErrorBody
from consumers.gateway.models import BulkReplayed, Purged, WebhookDeadLetterPage, WebhookReplayed
from consumers.gateway.responses import AUTH_ERRORS, errors, json_response
from consumers.notifier.dead import list_webhook_dead, replay_one_webhook_dead, replay_webhook_each
from streams import dead
from streams.errors import DeadLetterNotFound, StreamcrewError

log = logging.getLogger("streamcrew.gateway")
router = APIRouter(tags=["operations"])
# The one list, streams.dead.REASONS (the CLI's --reason checks it too): a reason added there is taken here and listed
# in the OpenAPI enum; any other ?reason= is a 422 naming them. (A Literal of a tuple is the Literal of its values.)
ReasonName = Literal[dead.REASONS]  # type: ignore[valid-type]
Reason = Annotated[ReasonName | None, Query(description="only dead letters of this reason (default: all)")]
WebhookEntryId = Annotated[str, Path(pattern=dead.DEAD_ENTRY_PATTERN,
                                     description="webhook dead letter's entry_id: its entry ID, then :<partition> with partitions")]


class ReplayCutOff(BaseModel):
    """503: the shared error shape; a replay Redis cut off part-way also lists what went back before."""

    error: ErrorBody
    replayed: list[str] = Field(default_factory=list, description="what went back before Redis went away (as the 202's)")
    skipped: list[str] = Field(default_factory=list)


REPLAY_ERRORS = {**errors(403, *AUTH_ERRORS),
                 503: {"model": ReplayCutOff, "description": "Redis unreachable; part-way, what went back is listed"}}


def _replayed(done: dead.Replay) -> Response:
    """202 with what went back; cut off by an outage, the usual 503 (Retry-After: 1) that still says what went back
    (``replayed``, ``skipped`` beside ``error``): the client could not learn it otherwise."""
    if done.outage is None:
        return json_response(202, {"replayed": done.replayed, "skipped": done.skipped})
    log.warning("redis unavailable part-way through a replay, after %d replayed: %s", len(done.replayed), done.outage)
    error = {"code": "redis_unavailable", "message": f"the job store (Redis) became unavailable part-way: {len(done.replayed)} "
             "replayed (listed), the rest are still dead letters (one may have gone back, its answer lost); "
             "retry later: one already replayed is not found again"}
    return json_response(503, {"error": error, "replayed": done.replayed, "skipped": done.skipped}, headers={"Retry-After": "1"})


@router.delete("/dead", response_model=Purged, summary="Purge dead letters", responses=errors(403, *AUTH_ERRORS))
async def purge_dead_letters(state: State, _: Operator, reason: Reason = None) -> Response:
    """Delete every dead letter, or those of one ``reason``; answers how many went."""
    return json_response(200, {"purged": await dead.purge(state.redis, state.keys, reason=reason, partitions=state.settings.partitions)})


@router.post("/dead/replay", status_code=202, response_model=BulkReplayed, summary="Replay dead letters",
             responses=REPLAY_ERRORS)
async def replay_dead_letters(state: State, _: Operator, reason: Reason = None) -> Response:
    """Send every dead letter present now (or those of one ``reason``) back to its lane with a fresh attempt
    budget; a letter that cannot go back (not from a lane, replayed elsewhere) is skipped with why."""
    return _replayed(await dead.gather(dead.replay_each(state.redis, state.keys, reason=reason, partitions=state.settings.partitions)))


@router.get("/webhooks/dead", response_model=WebhookDeadLetterPage, summary="List webhook dead letters",
            responses=errors(403, *AUTH_ERRORS))
async def list_webhook_dead_letters(
    state: State, _: Operator,
    count: Annotated[int, Query(ge=1, le=1000, description="page size")] = 100,
    after: Annotated[str | None, Query(pattern=dead.DEAD_ENTRY_PATTERN, description="entry_id the previous page ended with")] = None,
) -> Response:
    """Webhook deliveries that exhausted their attempts, got 410 Gone or were refused, oldest first
    (of every partition, merged)."""
    letters = await list_webhook_dead(state.redis, state.keys, count, after=after, partitions=state.settings.partitions)
    page = [letter.model_dump(mode="json") for letter in letters]
    next_after = letters[-1].entry_id if len(letters) == count else None
    return json_response(200, {"dead_letters": page, "next_after": next_after})


@router.post("/webhooks/dead/replay", status_code=202, response_model=WebhookReplayed, summary="Replay all webhook dead letters",
             responses=REPLAY_ERRORS)
async def replay_all_webhook_dead_letters(state: State, _: Operator) -> Response:
    """Queue every webhook dead letter present now (of every partition) for delivery again (a running notifier delivers them)."""
    return _replayed(await dead.gather(replay_webhook_each(state.redis, state.keys, None, partitions=state.settings.partitions)))


@router.post("/webhooks/dead/{entry_id}/replay", status_code=202, response_model=WebhookReplayed,
             summary="Replay a webhook dead letter", responses=errors(403, 404, 409, *AUTH_ERRORS))
async def replay_webhook_dead_letter(entry_id: WebhookEntryId, state: State, _: Operator) -> Response:
    """Queue one webhook dead letter for delivery again (in its partition), with a fresh attempt budget;
    ``409`` for a bare entry ID that more than one partition has."""
    try:
        name = await replay_one_webhook_dead(state.redis, state.keys, entry_id, partitions=state.settings.partitions)
    except DeadLetterNotFound:
        raise ApiError(404, "dead_letter_not_found", f"no webhook dead letter {entry_id}") from None
    except StreamcrewError as exc:
        raise ApiError(409, "cannot_replay", str(exc)) from None
    return json_response(202, {"replayed": [name], "skipped": []})

