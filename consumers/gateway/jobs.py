"""POST /jobs, GET /jobs/{job_id}, GET /jobs/{job_id}/result."""

from __future__ import annotations

import re
from typing import Annotated, TypeVar

from fastapi import APIRouter, Depends, Path, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from starlette.responses import Response

from consumers.gateway.auth import Caller, authorize, identify
from consumers.gateway.errors import ApiError
from consumers.gateway.models import ID_PATTERN, JobAccepted, JobResultView, JobSubmission, JobView
from consumers.gateway.responses import AUTH_ERRORS, errors, job_links, job_view, json_response
from consumers.gateway.state import GatewayState, gateway_state
from streams.envelope import DATA_CHECKED, JobRequest, lane_for_request, now_ms
from streams.job_ids import JOB_ID_MAX
from streams.errors import InvalidRequest, RequestTooLarge
from streams.records import JobHead, JobRecord, ParseTurn, get_job, get_job_head
from streams.workflow import WORKFLOW_AGENT

router = APIRouter(tags=["jobs"])
M = TypeVar("M", bound=BaseModel)
# W3C trace context's first 55 characters: version (ff is invalid), trace-id, parent-id (neither all zeros), flags
TRACEPARENT = re.compile(r"(?!ff)([0-9a-f]{2})-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")
TRACEPARENT_LEN = 55
JobIdPath = Annotated[str, Path(min_length=1, max_length=JOB_ID_MAX, pattern=ID_PATTERN, description="job id")]
State = Annotated[GatewayState, Depends(gateway_state)]
Authorized = Annotated[Caller, Depends(authorize)]


def trace_context(traceparent: str | None) -> str | None:
    """The ``traceparent`` header to carry, or None for one the W3C spec says to ignore (the job then carries none).

    Version 00 is exactly 55 characters; a later one may add fields after a '-', which a reader of version 00
    must not interpret: its first 55 characters are carried, as they are parsed."""
    if not traceparent or not (found := TRACEPARENT.match(traceparent)):
        return None
    more = traceparent[TRACEPARENT_LEN:]
    if not more:
        return traceparent
    if found.group(1) == "00" or not more.startswith("-"):
        return None
    return traceparent[:TRACEPARENT_LEN]


def _is_json(content_type: str | None) -> bool:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def _unknown_step_agents(data: object, known: list[str]) -> str | None:
    """A workflow's first step agent that STREAMCREW_KNOWN_AGENTS leaves out: steps are jobs too (the worker
    checks the graph itself; a malformed one is its rejection to give)."""
    steps = data.get("steps") if isinstance(data, dict) else None
    for step in steps if isinstance(steps, list) else []:
        agent = step.get("agent") if isinstance(step, dict) else None
        if isinstance(agent, str) and agent not in known:
            return agent[:80]
    return None


def parse_submission(body: bytes, content_type: str | None) -> JobSubmission:
    """The body as a JobSubmission, or the same 422 FastAPI's own validation gives."""
    return parse_body(JobSubmission, body, content_type)


def parse_body(model: type[M], body: bytes, content_type: str | None) -> M:
    """The body as ``model``, or the same 422 FastAPI's own validation gives (never its 400 for bad JSON)."""
    if not _is_json(content_type):
        raise ApiError(422, "invalid_request", "body: send a JSON object with 'Content-Type: application/json'")
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        raise _in_body(exc) from None


# Listing a body's problems costs ~3 µs each (pydantic builds every one; the answer shows 20): a body of 150,000
# unknown fields took 0.5 s of the event loop, every tenant's requests waiting; 20 bodies of 999 held another tenant's
# read 94 ms. Past this many, one line says how many.
MAX_PROBLEMS_LISTED = 100


def _in_body(exc: ValidationError) -> RequestValidationError:
    if (count := exc.error_count()) > MAX_PROBLEMS_LISTED:
        return RequestValidationError([{"type": "too_many_problems", "loc": ("body",), "input": None,
                                        "msg": f"{count} problems (unknown fields?); send the documented fields only"}])
    return RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)])


# POST /jobs is the hot path: it reads and validates its body itself (pydantic-core parses the JSON in one
# call) instead of through FastAPI's dependency solving, which cost a third of its CPU. So the OpenAPI
# entries FastAPI would derive from typed parameters are given here.
SUBMIT_OPENAPI = {
    "requestBody": {"required": True, "content": {"application/json": {"schema": JobSubmission.model_json_schema()}}},
    "parameters": [{"name": "traceparent", "in": "header", "required": False, "schema": {"type": "string"},
                    "description": "W3C trace context, carried to the result"}],
    "security": [{"HTTPBearer": []}],
}


@router.post(
    "/jobs", status_code=202, response_model=JobAccepted, summary="Submit a job", openapi_extra=SUBMIT_OPENAPI,
    responses={200: {"model": JobView, "description": "a job with this id already exists: its record"},
               **errors(403, 409, 413, *AUTH_ERRORS)},
)
async def submit_job(request: Request) -> Response:
    """Queue a job at once: 202 with its id and links; a repeated ``id`` answers 200 with the existing job."""
    state: GatewayState = request.app.state.gateway
    caller = await identify(request)
    raw = await request.body()
    async with state.large_bodies.turn(caller.bucket, len(raw)):  # the parse and the envelope are the costly part
        body = parse_submission(raw, request.headers.get("content-type"))
        job_request = request_for(state, caller, body, request.headers.get("traceparent"))
    return await accept_request(state, caller, job_request, lane_for_request(body.priority, body.data))


def request_for(state: GatewayState, caller: Caller, body: JobSubmission, traceparent: str | None) -> JobRequest:
    """The request ``body`` asks ``caller`` to publish, or the API's error (4xx) for it (also POST /tasks)."""
    known = state.settings.known_agents
    if known is not None and body.agent not in known:
        raise ApiError(422, "invalid_request", f"agent: unknown agent {body.agent!r}; this deployment runs {', '.join(known)}")
    if known is not None and body.agent == WORKFLOW_AGENT and (unknown := _unknown_step_agents(body.data, known)):
        raise ApiError(422, "invalid_request", f"data.steps: unknown agent {unknown!r}; this deployment runs {', '.join(known)}")
    if body.webhook is not None and (refusal := state.webhook_rules.literal_refusal(body.webhook)):
        raise _refused_webhook(body.webhook, refusal)
    tenant = body.tenant
    if caller.tenant is not None:
        if tenant is not None and tenant != caller.tenant:
            raise ApiError(403, "tenant_mismatch", f"this key is bound to tenant {caller.tenant!r}")
        tenant = caller.tenant
    try:
        return JobRequest.model_validate({  # data was checked by JobSubmission
            "agent": body.agent, "data": body.data, "id": body.id, "webhook": body.webhook, "tenant": tenant,
            "max_attempts": body.max_attempts, "timeout_s": body.timeout_s, "deadline": body.deadline,
            "traceparent": trace_context(traceparent), "submitted_at": now_ms(),
        }, context={DATA_CHECKED: True})
    except ValidationError as exc:  # a rule of the envelope's that JobSubmission does not repeat: 422, not 500
        raise _in_body(exc) from None


async def accept_request(state: GatewayState, caller: Caller, job_request: JobRequest, lane: str) -> Response:
    """Publish ``job_request`` on ``lane``: 202 for a new job, 200 with the record for a repeated id (also POST /tasks)."""
    try:
        published = await state.batcher.publish(job_request, lane)
    except RequestTooLarge as exc:
        raise ApiError(413, "request_too_large", str(exc)) from None
    except InvalidRequest as exc:  # this request alone: the others of its batch went out
        raise ApiError(422, "invalid_request", str(exc)) from None
    if published.status == "conflict":  # a raw XADD squatted both names an id-less job could take
        raise ApiError(409, "id_conflict", "no free id for this job; retry")
    links = job_links(published.job_id)
    if published.created:  # the record names its tenant from the publish on: no further call whose failure would hide it
        return json_response(202, {"job_id": published.job_id, "status": published.status, "lane": published.lane, "links": links},
                             headers={"Location": links["self"]})
    taken = ApiError(409, "id_conflict", f"job id {published.job_id!r} is already in use")
    if caller.tenant is not None and published.tenant != caller.tenant:  # whose status publish.lua read, told with it
        raise taken
    record = await get_job(state.redis, state.keys, published.job_id, partitions=state.settings.partitions, turn=parse_turn(state, caller))
    if record is None:  # ended and expired between the publish and this read: the status of the caller's own job
        return json_response(200, {"job_id": published.job_id, "status": published.status, "links": links})
    if caller.tenant is not None and record.tenant != caller.tenant:  # expired, and another tenant's took its place since
        raise taken
    return json_response(200, job_view(record))


def _refused_webhook(url: str, refusal: str) -> RequestValidationError:
    """A webhook the notifier would refuse is 422 now, not a webhook dead letter after the job ran."""
    return RequestValidationError([{"type": "webhook_refused", "loc": ("body", "webhook"), "input": url,
                                    "msg": f"the notifier would refuse it: {refusal}"}])


def sees(caller: Caller, record: JobRecord | JobHead | None) -> bool:
    """Whether ``caller`` may see ``record``: a tenant-bound key sees only its tenant's jobs."""
    return record is not None and (caller.tenant is None or record.tenant == caller.tenant)


def _not_found(job_id: str) -> ApiError:
    return ApiError(404, "job_not_found", f"no job {job_id!r} (unknown, or its record expired)")


async def visible_head(state: GatewayState, caller: Caller, job_id: str) -> JobHead:
    """The head of the job's record (streams.records.JobHead: no result, no steps), or 404."""
    head = await get_job_head(state.redis, state.keys, job_id, partitions=state.settings.partitions)
    if head is None or not sees(caller, head):
        raise _not_found(job_id)
    return head


def parse_turn(state: GatewayState, caller: Caller) -> ParseTurn:
    """A large stored result is parsed in the caller's turn, as a large body is (consumers.gateway.large_bodies): ten
    reads at once of one 0.86 MiB result held another tenant's requests for all ten parses in a row."""
    return lambda size: state.large_bodies.turn(caller.bucket, size, what="results")


async def visible_job(state: GatewayState, caller: Caller, job_id: str, *, head_seen: bool = False) -> JobRecord:
    """The job's record, or 404; a tenant-bound key sees only its tenant's jobs. Its head is checked first (unless
    ``head_seen``: the caller just did), so another tenant's id is a 404 without its result fetched or parsed."""
    if caller.tenant is not None and not head_seen:
        await visible_head(state, caller, job_id)
    record = await get_job(state.redis, state.keys, job_id, partitions=state.settings.partitions, turn=parse_turn(state, caller))
    if record is None or not sees(caller, record):  # checked again: the record may have expired and been written anew
        raise _not_found(job_id)
    return record


@router.get("/jobs/{job_id}", response_model=JobView, summary="A job's status", responses=errors(404, *AUTH_ERRORS))
async def get_job_status(job_id: JobIdPath, state: State, caller: Authorized) -> Response:
    """The job's status record: queued, running, retrying, or how it ended."""
    return json_response(200, job_view(await visible_job(state, caller, job_id)))


@router.get(
    "/jobs/{job_id}/result", response_model=JobResultView, summary="A job's result",
    responses={202: {"model": JobView, "description": "not finished yet: the status record; poll again"}, **errors(404, *AUTH_ERRORS)},
)
async def get_job_result(job_id: JobIdPath, state: State, caller: Authorized) -> Response:
    """200 with the result event once the job ended (completed, failed, rejected, expired); 202 until then."""
    record = await visible_job(state, caller, job_id)
    if not record.terminal:
        return json_response(202, job_view(record), headers={"Retry-After": "1"})
    return json_response(200, record.as_result().to_json_dict())
