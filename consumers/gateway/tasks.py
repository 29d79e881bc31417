"""The second design's routes (contract §13): POST /tasks runs ``ask`` on a query; GET /jobs/{id}/status.

They are thin views over POST /jobs and the job record, so a task is a job
like any other: same lanes, auth, tenant scoping, results and webhooks.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from consumers.gateway.auth import Caller, authorize, identify
from consumers.gateway.jobs import JobIdPath, accept_request, parse_body, request_for, visible_head
from consumers.gateway.models import JobAccepted, JobSubmission, JobTimes, TaskSubmission
from consumers.gateway.responses import AUTH_ERRORS, errors, json_response
from consumers.gateway.state import GatewayState, gateway_state
from streams.envelope import lane_for_request
from streams.records import JobHead

router = APIRouter(tags=["tasks"])
State = Annotated[GatewayState, Depends(gateway_state)]
Authorized = Annotated[Caller, Depends(authorize)]
TASK_AGENT = "ask"


# Read like POST /jobs (one pydantic parse, the API's 422 for any bad body), so the OpenAPI entries are given here.
TASK_OPENAPI = {
    "requestBody": {"required": True, "content": {"application/json": {"schema": TaskSubmission.model_json_schema()}}},
    "security": [{"HTTPBearer": []}],
}


@router.post(
    "/tasks", status_code=202, response_model=JobAccepted, summary="Submit a query (the ask agent)", openapi_extra=TASK_OPENAPI,
    responses=errors(403, 409, 413, *AUTH_ERRORS),  # 409: no free id (accept_request), as for POST /jobs
)
async def submit_task(request: Request) -> Response:
    """Queue ``query`` for the ``ask`` agent: 202 ``{"job_id", "status": "queued"}``; follow it with
    ``GET /jobs/{job_id}/status`` and ``GET /jobs/{job_id}/result`` (``{"result": {"answer": ...}}``)."""
    state: GatewayState = request.app.state.gateway
    caller = await identify(request)
    raw = await request.body()
    async with state.large_bodies.turn(caller.bucket, len(raw)):  # as POST /jobs: one large body per caller at a time
        task = parse_body(TaskSubmission, raw, request.headers.get("content-type"))
        body = JobSubmission(agent=TASK_AGENT, data={"prompt": task.query}, priority=task.priority, webhook=task.webhook,
                             tenant=task.user_id)
        job_request = request_for(state, caller, body, request.headers.get("traceparent"))
    return await accept_request(state, caller, job_request, lane_for_request(body.priority, body.data))


def _iso(epoch_ms: int | None) -> str | None:
    """ISO 8601 of a stored time; None for one no datetime holds (a raw writer may store the year 58888)."""
    if epoch_ms is None:
        return None
    try:
        return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC).isoformat(timespec="milliseconds")
    except (ValueError, OverflowError, OSError):
        return None


def job_times(record: JobHead) -> dict[str, str | None]:
    return {"job_id": record.id, "status": record.status, "queued_at": _iso(record.submitted_at),
            "started_at": _iso(record.started_at), "completed_at": _iso(record.finished_at if record.terminal else None)}


@router.get("/jobs/{job_id}/status", response_model=JobTimes, summary="A job's status and times", responses=errors(404, *AUTH_ERRORS))
async def get_job_times(job_id: JobIdPath, state: State, caller: Authorized) -> Response:
    """``{"status", "queued_at", "started_at", "completed_at"}``: queue latency is started − queued."""
    return json_response(200, job_times(await visible_head(state, caller, job_id)))  # no result, no steps: none read
