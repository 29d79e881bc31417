"""Building answers: JSON bytes via orjson, links, and the documented error responses per route."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from starlette.responses import Response

from consumers.gateway.errors import ErrorResponse
from streams.envelope import json_view
from streams.records import JobRecord
from streams.strict_json import json_bytes


def json_response(status: int, payload: Any, *, headers: dict[str, str] | None = None) -> Response:
    """A JSON answer; a number past 64 bits (a raw writer's) reads as null, a value nested past orjson's depth is
    still written (streams.strict_json.json_bytes), neither a 500."""
    return Response(json_bytes(payload), status_code=status, media_type="application/json", headers=headers)


def job_links(job_id: str) -> dict[str, str]:
    base = f"/jobs/{quote(job_id, safe='')}"
    return {"self": base, "result": f"{base}/result", "events": f"{base}/events"}


def job_view(record: JobRecord) -> dict[str, Any]:
    """A status record as the API shows it: ``job_id`` first, ``links`` last (the order a reader of the raw JSON,
    and the docs' examples, see)."""
    fields = json_view(record, exclude_none=True, exclude=frozenset({"id"}))
    if record.status == "completed":  # an agent's output of null is a result too (contract §3)
        fields.setdefault("result", None)
    return {"job_id": record.id, **fields, "links": job_links(record.id)}  # written by json_bytes: wide integers null


def errors(*statuses: int, json_route: bool = True) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for the error answers a route can give, all of the shared shape.

    FastAPI documents a ``model`` under the route's own media type, which is wrong for a route
    whose success is not JSON (the event stream), so there the content is spelled out.
    """
    text = {
        401: "no valid API key (only when keys are configured)",
        403: "the key's tenant may not do this",
        404: "not found",
        409: "conflict",
        413: "body or encoded request too large",
        422: "invalid request; the message names each bad field",
        429: "rate limit exceeded; see Retry-After",
        503: "Redis unreachable",
    }
    if json_route:
        return {s: {"model": ErrorResponse, "description": text[s]} for s in statuses}
    content = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}
    return {s: {"description": text[s], "content": content} for s in statuses}


AUTH_ERRORS = (401, 422, 429, 503)
