"""Kafka records <-> streamcrew envelopes, without faust: a request record in, a result record out.

A request record's value is a JSON object of contract §2's fields (``data`` a JSON object), plus
``priority`` (0-10 or a lane name) or ``lane``; its key, when set, is the job id. Anything else is
:class:`Invalid`, with a reason a person can act on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import ValidationError

from streams.envelope import MAX_EPOCH_MS, REQUEST_FIELDS, DeadLetter, JobRequest, JobResult, lane_for_priority, now_ms
from streams.errors import DecodeError, InvalidRequest
from streams.producer import check_request
from streams.strict_json import TooDeep, has_wide_integer

ROUTING_FIELDS = ("priority", "lane")
# Contract §2's fields: a workflow step's parent, step and inputs are written by the workflow script only (a record
# carrying them would hand its agent forged dependency results and name itself a step of another's workflow).
RECORD_FIELDS = tuple(name for name in REQUEST_FIELDS if name not in ("parent", "step", "inputs"))
KEPT_VALUE_CHARS = 65_536
NUMBER_FIELDS = ("timeout_s", "deadline", "submitted_at")
WIDE_INTEGER = "value holds an integer beyond 64 bits (it would be read as a float); send it as a string"


@dataclass(frozen=True, slots=True)
class Coordinates:
    """Where a record sits in Kafka; names the job when neither the key nor the value does."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None = None

    @property
    def job_id(self) -> str:
        """A keyless, id-less record's job id: the same at every redelivery, and with the record's timestamp so a
        recreated topic's offsets (which start again at 0) do not meet the old topic's jobs, whose records live on for
        ``STREAMCREW_JOB_TTL_S`` and would turn every new record into a duplicate, never run."""
        if self.timestamp_ms is None or self.timestamp_ms < 0:  # -1 is Kafka's "no timestamp"
            return f"kafka-{self.topic}-{self.partition}-{self.offset}"
        return f"kafka-{self.topic}-{self.partition}-{self.offset}-{self.timestamp_ms}"

    @property
    def token(self) -> str:
        """The record's own name, the same at every redelivery (its timestamp too: not a recreated topic's record)."""
        return f"kafka:{self.topic}:{self.partition}:{self.offset}:{'' if self.timestamp_ms is None else self.timestamp_ms}"


@dataclass(frozen=True, slots=True)
class Parsed:
    request: JobRequest
    lane: str


@dataclass(frozen=True, slots=True)
class Invalid:
    error: str
    job_id: str
    agent: str = ""


def _text(raw: bytes | str | None) -> str | None:
    if raw is None:
        return None
    return raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw


def parse_request(key: bytes | str | None, value: bytes | str | None, where: Coordinates, *, max_bytes: int) -> Parsed | Invalid:
    """One request record as a lane request, or why it is not one."""
    key_text = _text(key) or None
    fallback_id = key_text or where.job_id
    if value is None:
        return Invalid("record has no value (a tombstone?); expected a JSON object", fallback_id)
    size = len(value)
    if size > max_bytes:
        return Invalid(f"record value is {size} bytes, over the {max_bytes}-byte limit", fallback_id)
    try:
        body = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        return Invalid(f"value is not JSON: {exc}", fallback_id)
    if not isinstance(body, dict):
        return Invalid(f"value must be a JSON object, got {type(body).__name__}", fallback_id)
    try:
        if has_wide_integer(_text(value) or ""):  # orjson read it as a float: the agent would get another number
            return Invalid(WIDE_INTEGER, fallback_id)
    except TooDeep as exc:  # let out, it crashed the agent, and faust acked its whole batch unpublished
        return Invalid(f"value {exc}", fallback_id)
    agent = body.get("agent") if isinstance(body.get("agent"), str) else ""
    unknown = sorted(set(body) - set(RECORD_FIELDS) - set(ROUTING_FIELDS))
    if unknown:
        return Invalid(f"unknown field(s) {', '.join(map(repr, unknown))}; a request has {', '.join(RECORD_FIELDS + ROUTING_FIELDS)}", fallback_id, agent)
    body_id = body.get("id")
    if key_text is not None and body_id is not None and body_id != key_text:
        return Invalid(f"record key {key_text[:80]!r} and field 'id' {str(body_id)[:80]!r} disagree; the key is the job id", fallback_id, agent)
    job_id = body_id if body_id is not None else fallback_id
    try:
        lane = _lane(body)
    except ValueError as exc:
        return Invalid(str(exc), str(job_id), agent)
    fields = {k: v for k, v in body.items() if k not in ROUTING_FIELDS}
    fields["id"] = job_id
    if isinstance(fields.get("data"), str):  # the Redis form: data as a JSON text
        try:
            fields["data"] = orjson.loads(fields["data"])
        except orjson.JSONDecodeError as exc:
            return Invalid(f"field 'data' is not JSON: {exc}", str(job_id), agent)
        try:
            if has_wide_integer(body["data"]):
                return Invalid(WIDE_INTEGER, str(job_id), agent)
        except TooDeep as exc:
            return Invalid(f"field 'data' {exc}", str(job_id), agent)
    if fields.get("submitted_at") is None:  # null is no time either: it gets the default an absent one does
        stamp = where.timestamp_ms  # -1 is Kafka's "no timestamp"
        fields["submitted_at"] = stamp if stamp is not None and 0 < stamp <= MAX_EPOCH_MS else now_ms()
    try:
        request = JobRequest.model_validate(fields, strict=False)
    except ValidationError as exc:
        return Invalid(_describe(exc), str(job_id), agent)
    if isinstance(fields.get("max_attempts"), bool | float):
        return Invalid(f"field 'max_attempts' must be an integer >= 1, got {fields['max_attempts']!r}", str(job_id), agent)
    for name in NUMBER_FIELDS:  # the lax validation above reads true as 1: a "deadline": true would end the job expired
        if isinstance(fields.get(name), bool):
            return Invalid(f"field {name!r} must be a number, got {fields[name]!r}", str(job_id), agent)
    try:
        check_request(request)  # else the Producer refuses the whole batch, again at every redelivery
    except InvalidRequest as exc:
        return Invalid(str(exc), str(job_id), agent)
    return Parsed(request, lane)  # the encoded size is the Producer's check (RequestTooLarge), near the value's


def _lane(body: dict[str, Any]) -> str:
    if "priority" in body and "lane" in body:
        raise ValueError("give 'priority' or 'lane', not both")
    if "lane" in body:
        lane = body["lane"]
        if lane not in ("high", "normal", "low"):
            raise ValueError(f"field 'lane' must be high, normal or low, got {str(lane)[:40]!r}")
        return str(lane)
    priority = body.get("priority")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int | str)):
        raise ValueError(f"field 'priority' must be 0-10 or a lane name, got {str(priority)[:40]!r}")
    return lane_for_priority(priority)


def _describe(exc: ValidationError) -> str:
    return "; ".join(f"field {'.'.join(str(p) for p in e['loc']) or 'request'!r}: {e['msg']}" for e in exc.errors())


def dead_letter(invalid: Invalid, key: bytes | str | None, value: bytes | str | None, where: Coordinates) -> DeadLetter:
    """The dead letter of an invalid record: the record's text is kept (up to 64 KiB) so nothing is lost."""
    text = _text(value) or ""
    kept = {"key": _text(key) or "", "value": text[:KEPT_VALUE_CHARS]}
    if len(text) > KEPT_VALUE_CHARS:
        kept["truncated"] = f"value cut at {KEPT_VALUE_CHARS} of {len(text)} characters; the record is at {where.topic}/{where.partition}@{where.offset}"
    return DeadLetter(
        id=invalid.job_id, agent=invalid.agent, reason="invalid", error=invalid.error,
        source_stream=f"kafka:{where.topic}", source_id=f"{where.partition}-{where.offset}",
        attempts=0, dead_at=now_ms(), request=kept,
    )


def result_record(fields: dict[str, str]) -> tuple[bytes, bytes]:
    """A result event as a Kafka record: key = job id, value = the JSON object webhooks carry.

    A raw XADD may hold what JSON cannot (an integer past 64 bits, bytes that are not UTF-8): a DecodeError like
    any malformed event, so that entry is dead-lettered instead of failing its whole batch at every reclaim."""
    result = JobResult.from_fields(fields)
    try:
        return result.id.encode(), orjson.dumps(result.to_json_dict())
    except (orjson.JSONEncodeError, UnicodeEncodeError, ValueError, TypeError, RecursionError) as exc:
        # ValueError: pydantic's dump of a result nested past its depth ("Circular reference detected")
        raise DecodeError(f"result event cannot be written as JSON: {exc}", fields) from None
