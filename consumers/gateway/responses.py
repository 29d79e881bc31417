"""Building answers: JSON bytes via orjson, links, and the documented error responses per route."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import orjson
from starlette.responses import Response

from consumers.gateway.errors import ErrorResponse
from streams.records import JobRecord


# The integers orjson writes: 64 bits, signed or not.
JSON_INTS = range(-(2**63), 2**64)


def json_response(status: int, payload: Any, *, headers: dict[str, str] | None = None) -> Response:
    try:
        body = orjson.dumps(payload)
    except orjson.JSONEncodeError:  # a number a raw writer stored beyond 64 bits: it reads as null, not as a 500
        body = orjson.dumps(_ints_as_json(payload))
    return Response(body, status_code=status, media_type="application/json", headers=headers)


def _ints_as_json(value: Any) -> Any:
    if isinstance(value, int):
        return value if value in JSON_INTS else None
    if isinstance(value, dict):
        return {k: _ints_as_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_ints_as_json(v) for v in value]
    return value


def job_links(job_id: str) -> dict[str, str]:
    base = f"/jobs/{quote(job_id, safe='')}"
    return {"self": base, "result": f"{base}/result", "events": f"{base}/events"}


def job_view(record: JobRecord) -> dict[str, Any]:
    """A status record as the API shows it: ``job_id`` first, ``links`` last."""
    body = record.model_dump(mode="json", exclude_none=True)
    if record.status == "completed":  # an agent's output of null is a result too (contract §3)
        body.setdefault("result", None)
    body["job_id"] = body.pop("id")
    body["links"] = job_links(record.id)
    for name, value in body.items():  # as json_response would: also in event streams, which do not use it
        if isinstance(value, int) and value not in JSON_INTS:
            body[name] = None
    return body


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
