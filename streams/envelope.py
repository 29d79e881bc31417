"""The three envelopes on the wire: requests, results and dead letters.

Each has ``to_fields()`` (flat ``str -> str`` for XADD) and ``from_fields()``.
Decoding a request never raises anything but :class:`DecodeError`, which keeps
the raw fields so a malformed entry can be dead-lettered with its reason.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from streams.errors import DecodeError
from streams.job_ids import STEP_ID_RESERVED, check_job_id, is_step_entry, may_carry_id, reserved_id_problem, takes_generated_id
from streams.keys import LANES
from streams.raw import MAX_REQUEST_FIELDS, not_utf8, repaired_fields, request_bytes, request_field_count, utf8_len
from streams.strict_json import TooDeep, encode_data, has_wide_integer, json_default

# Set by workflow.lua instead of 'inputs' when a step's inputs together pass the result limit: the step is rejected.
INPUTS_OMITTED = "inputs_omitted"
WORKFLOW_INPUTS_SHARES = 16  # workflow.lua's WF_INPUTS_SHARES: the workflow's steps' inputs together, in result limits


# The reason a dead letter is listed with when its fields are not ones streamcrew writes: it cannot be replayed.
MALFORMED_LETTER = "malformed"
# Epoch milliseconds past year 9999 are no time a reader can show (a µs or ns value sent as ms, say).
MAX_EPOCH_MS = 253_402_300_799_999
# A request's attempt budget, bounded wherever a request is read (gateway, Python API, Kafka, a raw XADD's worker):
# an endless timeout, or endless attempts, would keep a failing job retrying for good. inf and NaN are refused too.
MAX_TIMEOUT_S, MAX_ATTEMPTS = 86_400, 1000


# A job's (or workflow's) error when its deadline passed before it first started: no run, no state left behind.
NOT_STARTED_IN_TIME = "deadline passed before the job started"


WORKFLOW_AGENT = "workflow"  # the built-in agent that runs a graph of steps (streams.workflow, contract §9)


class Status(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    RETRYING = "retrying"
    COMPLETED = "completed"
    FAILED = "failed"
    REJECTED = "rejected"
    EXPIRED = "expired"
    SKIPPED = "skipped"  # a workflow step that can no longer run: no job attempt, no result event


TERMINAL: frozenset[str] = frozenset({Status.COMPLETED, Status.FAILED, Status.REJECTED, Status.EXPIRED, Status.SKIPPED})

REQUEST_FIELDS = (
    "agent", "data", "id", "webhook", "tenant", "max_attempts",
    "timeout_s", "deadline", "traceparent", "submitted_at", "parent", "step", "inputs",
)


# Validation context key: ``data`` was already found strict JSON (parsed by orjson, or checked at the edge).
DATA_CHECKED = "data_checked"


def now_ms() -> int:
    return int(time.time() * 1000)


def entry_ms(entry_id: str) -> int:
    """When an entry was added: the milliseconds part of its ID (``1700000000000-0``), or now for an ID that is no
    time (past year 9999: a raw XADD may name any ID, and the lane's later ``*`` IDs then follow it)."""
    try:
        ms = int(entry_id.split("-", 1)[0])
    except ValueError:
        return now_ms()
    return ms if ms <= MAX_EPOCH_MS else now_ms()


def epoch_ms_or(text: str, fallback: int) -> int:
    """``text`` as epoch milliseconds when it is one (ASCII digits, at most year 9999), else ``fallback``."""
    return int(text) if text.isascii() and text.isdigit() and int(text) <= MAX_EPOCH_MS else fallback


def entry_order(entry_id: str) -> tuple[int, int]:
    """``(ms, seq)`` of a stream entry ID: how entries of several streams (partitions) are put in one order."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def lane_for_priority(priority: int | str | None) -> str:
    """Map a lane name or a 0-10 priority to a lane: 7-10 high, 4-6 normal, 0-3 low."""
    if priority is None:
        return "normal"
    if isinstance(priority, str):
        if priority in LANES:
            return priority
        try:
            priority = int(priority)
        except ValueError:
            raise ValueError(f"priority must be one of {', '.join(LANES)} or 0-10, got {priority!r}") from None
    elif isinstance(priority, bool) or not isinstance(priority, int):  # True is no priority 1, nor 7.5 one of 7-10
        raise ValueError(f"priority must be one of {', '.join(LANES)} or an integer 0-10, got {priority!r}")
    if not 0 <= priority <= 10:
        raise ValueError(f"priority must be 0-10, got {priority}")
    return "high" if priority >= 7 else "normal" if priority >= 4 else "low"


def priority_in_data(data: Mapping[str, Any]) -> int | None:
    """A 0-10 ``priority`` in a request's data: ``data.priority``, else ``data.data.priority``
    (the first design's payload nests it). Anything but an integer 0-10 is not a priority."""
    for holder in (data, data.get("data")):
        if isinstance(holder, Mapping):
            value = holder.get("priority")
            if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 10:
                return value
    return None


def data_priority_problem(data: Mapping[str, Any]) -> str | None:
    """Why the ``priority`` in a request's data cannot pick its lane, looked for as :func:`priority_in_data` does: a
    number that is not an integer 0-10 (a string, say, is the agent's own field, not a priority). None otherwise."""
    for where, holder in (("data.priority", data), ("data.data.priority", data.get("data"))):
        value = holder.get("priority") if isinstance(holder, Mapping) else None
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if isinstance(value, int) and 0 <= value <= 10:
            return None  # this one picks the lane
        return f"{where} must be an integer 0-10, got {value!r}"
    return None


def lane_for_request(priority: int | str | None, data: Mapping[str, Any]) -> str:
    """The lane of a request: its explicit ``priority``, else the one in its data, else ``normal`` (contract §13)."""
    return lane_for_priority(priority if priority is not None else priority_in_data(data))


def flat(fields: Mapping[str, str]) -> list[str]:
    """``{k: v}`` as ``[k, v, ...]``, the shape XADD and HSET take in Lua."""
    out: list[str] = []
    for key, value in fields.items():
        out += (key, value)
    return out


def dumps(value: Any) -> str:
    return orjson.dumps(value, default=json_default).decode()


class JobRequest(BaseModel):
    """A request as a producer XADDs it to a lane (contract §2)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    agent: str = Field(min_length=1)
    data: dict[str, Any]
    id: str | None = None
    webhook: str | None = None
    tenant: str | None = None
    max_attempts: int | None = Field(default=None, ge=1, le=MAX_ATTEMPTS)
    timeout_s: float | None = Field(default=None, gt=0, le=MAX_TIMEOUT_S, allow_inf_nan=False)
    deadline: int | None = Field(default=None, ge=0, le=MAX_EPOCH_MS)
    traceparent: str | None = None
    submitted_at: int | None = Field(default=None, ge=0, le=MAX_EPOCH_MS)
    parent: str | None = None  # workflow steps: the workflow's id, its step id, its dependencies' results
    step: str | None = None
    inputs: dict[str, Any] | None = None

    @field_validator("id")
    @classmethod
    def _id_alphabet(cls, value: str | None) -> str | None:
        return None if value is None else check_job_id(value)

    @model_validator(mode="after")
    def _step_ids_are_the_systems(self) -> JobRequest:
        """Only a workflow's step entry (written by the workflow script) carries an id with '::'."""
        if self.id and not may_carry_id(self.id, self.parent, self.step):
            raise ValueError(f"job id {self.id[:80]!r}: {STEP_ID_RESERVED}")
        if (self.parent, self.step, self.inputs) != (None, None, None) and not is_step_entry(self.id, self.parent, self.step):
            # a step's fields on an entry no workflow wrote (a raw XADD): the agent ran as that workflow's step, and
            # its result event named the workflow and step, a step of it that never was
            return self.model_copy(update={"parent": None, "step": None, "inputs": None})
        return self

    @field_validator("max_attempts", "timeout_s")
    @classmethod
    def _none_on_a_workflow(cls, value: float | None, info: ValidationInfo) -> float | None:
        """A workflow's attempts and time limits are its steps' and its data's: a request-level one was taken, then
        never applied. A field validator, so a 422 names the field (``agent`` is validated first)."""
        if value is not None and info.data.get("agent") == WORKFLOW_AGENT:
            raise ValueError("a workflow takes none of its own; set data.timeout_s (the whole "
                             "workflow's time limit) or each step's timeout_s and max_attempts")
        return value

    @field_validator("data")
    @classmethod
    def _strict_json(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        if not (info.context or {}).get(DATA_CHECKED):  # e.g. orjson.loads never yields NaN, inf or a big int
            encode_data(value)
        return value

    def to_fields(self) -> dict[str, str]:
        fields: dict[str, str] = {"agent": self.agent, "data": encode_data(self.data)}
        for name in ("id", "webhook", "tenant", "max_attempts", "timeout_s", "deadline", "traceparent", "submitted_at", "parent", "step"):
            value = getattr(self, name)
            if value is not None:
                fields[name] = str(value)
        if self.inputs is not None:
            fields["inputs"] = dumps(self.inputs)
        return fields

    @classmethod
    def from_fields(cls, raw: Mapping[str, str], *, max_bytes: int | None = None, max_inputs_bytes: int | None = None) -> JobRequest:
        """Validate raw stream fields; any problem is a DecodeError naming it.

        A workflow step's ``inputs`` (its dependencies' results, added by workflow.lua) are held to
        ``max_inputs_bytes`` (STREAMCREW_MAX_RESULT_BYTES) when it is given, not to ``max_bytes``: a step's
        request is its own data, and the results it depends on were each allowed up to that size.
        """
        if (count := request_field_count(raw)) > MAX_REQUEST_FIELDS:
            raise DecodeError(f"request has {count} fields, over the limit of {MAX_REQUEST_FIELDS}", raw)
        if bad := not_utf8(raw):
            raise DecodeError(f"field {bad!r} is not valid UTF-8", raw)
        if max_bytes is not None:
            size = request_bytes(raw)
            if max_inputs_bytes is not None and "inputs" in raw and is_step_entry(raw.get("id"), raw.get("parent"), raw.get("step")):
                inputs_size = utf8_len(raw["inputs"])
                if inputs_size > max_inputs_bytes:
                    raise DecodeError(f"field 'inputs' is {inputs_size} bytes, over STREAMCREW_MAX_RESULT_BYTES ({max_inputs_bytes})", raw)
                size -= utf8_len("inputs") + inputs_size
            if size > max_bytes:
                raise DecodeError(f"request is {size} bytes, over the {max_bytes}-byte limit", raw)
        if "agent" not in raw or not raw["agent"]:
            raise DecodeError("missing field 'agent'", raw)
        if "data" not in raw:
            raise DecodeError("missing field 'data'", raw)
        try:
            data = orjson.loads(raw["data"])
        except orjson.JSONDecodeError as exc:
            raise DecodeError(f"field 'data' is not JSON: {exc}", raw) from None
        if not isinstance(data, dict):
            raise DecodeError(f"field 'data' must be a JSON object, got {type(data).__name__}", raw)
        try:
            if has_wide_integer(raw["data"]):
                raise DecodeError("field 'data' holds an integer beyond 64 bits (it would be read as a float)", raw)
        except TooDeep as exc:
            raise DecodeError(f"field 'data' {exc}", raw) from None
        if takes_generated_id(raw):  # refused as the gateway and the producer refuse it; named by its own entry
            raise DecodeError(f"job id {raw['id'][:80]!r}: {reserved_id_problem(raw['id'])}", raw)
        values: dict[str, Any] = {k: v for k, v in raw.items() if k in REQUEST_FIELDS}
        values["data"] = data
        if INPUTS_OMITTED in raw:  # workflow.lua left them out rather than build and store a request that large
            raise DecodeError(_inputs_omitted(raw[INPUTS_OMITTED]), raw)
        if "inputs" in raw:
            try:
                values["inputs"] = orjson.loads(raw["inputs"])
            except orjson.JSONDecodeError as exc:
                raise DecodeError(f"field 'inputs' is not JSON: {exc}", raw) from None
        try:
            request = cls.model_validate(values, context={DATA_CHECKED: True})
        except ValidationError as exc:
            raise DecodeError(_describe(exc), raw) from None
        if request.max_attempts is not None and raw.get("max_attempts", "").strip() != str(request.max_attempts):
            raise DecodeError(f"field 'max_attempts' must be an integer >= 1, got {raw['max_attempts']!r}", raw)
        return request


def _inputs_omitted(value: str) -> str:
    """Why workflow.lua left a step's inputs out: ``<bytes>`` over the step's limit, ``workflow:<bytes>`` over the workflow's."""
    scope, _, size = value.rpartition(":")
    if scope == "workflow":
        return (f"the workflow's step inputs would come to {size[:20]} bytes in all, over {WORKFLOW_INPUTS_SHARES} times "
                "STREAMCREW_MAX_RESULT_BYTES")
    return f"the step's inputs (its dependencies' results) are {size[:20]} bytes together, over STREAMCREW_MAX_RESULT_BYTES"


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "request"
        parts.append(f"field {where!r}: {err['msg']}")
    return "; ".join(parts)


def result_fields(
    id: str, agent: str, status: Status, attempts: int, *, result: Any = None, error: str | None = None,
    submitted_at: int | None = None, started_at: int | None = None, finished_at: int | None = None, worker: str | None = None,
    usage: dict[str, Any] | None = None, webhook: str | None = None, tenant: str | None = None,
    traceparent: str | None = None, parent: str | None = None, step: str | None = None,
) -> dict[str, str]:
    """A result event's stream fields (contract §3). The worker builds them from trusted values on its hot
    path without a :class:`JobResult` (constructing the model cost more than the rest of a no-op job's ending)."""
    fields: dict[str, str] = {"id": id, "agent": agent, "status": str(status), "attempts": str(attempts)}
    if status == Status.COMPLETED:
        fields["result"] = dumps(result)
    for name, value in (("error", error), ("submitted_at", submitted_at), ("started_at", started_at), ("finished_at", finished_at),
                        ("worker", worker), ("webhook", webhook), ("tenant", tenant), ("traceparent", traceparent),
                        ("parent", parent), ("step", step)):
        if value is not None:
            fields[name] = str(value)
    if usage is not None:
        fields["usage"] = dumps(usage)
    return fields


def json_view(model: BaseModel, *, exclude_none: bool = False, exclude: frozenset[str] = frozenset()) -> dict[str, Any]:
    """``model.model_dump(mode="json")``, with its ``result`` as it is (JSON values, as parsed): pydantic's JSON mode
    refuses one nested past 254 levels with a ValueError (an agent's output within its workflow's result), which
    answered 500 over HTTP and broke an event stream off."""
    body = model.model_dump(mode="json", exclude_none=exclude_none, exclude={"result", *exclude})
    result = getattr(model, "result", None)
    if result is None and exclude_none:
        return body
    return {name: result if name == "result" else body[name] for name in type(model).model_fields
            if name == "result" or name in body}


class JobResult(BaseModel):
    """One terminal result event on the results stream (contract §3)."""

    model_config = ConfigDict(extra="ignore")

    id: str
    agent: str
    status: Status
    result: Any = None
    error: str | None = None
    attempts: int = 0
    submitted_at: int | None = None
    started_at: int | None = None
    finished_at: int | None = None
    worker: str | None = None
    usage: dict[str, Any] | None = None
    webhook: str | None = None
    tenant: str | None = None
    traceparent: str | None = None
    parent: str | None = None
    step: str | None = None

    def to_fields(self) -> dict[str, str]:
        return result_fields(
            self.id, self.agent, self.status, self.attempts, result=self.result, error=self.error,
            submitted_at=self.submitted_at, started_at=self.started_at, finished_at=self.finished_at, worker=self.worker,
            usage=self.usage, webhook=self.webhook, tenant=self.tenant, traceparent=self.traceparent, parent=self.parent, step=self.step,
        )

    @classmethod
    def from_fields(cls, raw: Mapping[str, str]) -> JobResult:
        values: dict[str, Any] = dict(raw)
        for name in ("result", "usage"):
            if name in values and isinstance(values[name], str):
                try:
                    values[name] = orjson.loads(values[name])
                except orjson.JSONDecodeError:
                    pass
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            raise DecodeError(_describe(exc), raw) from None

    def to_json_dict(self) -> dict[str, Any]:
        """The result as users see it over HTTP and webhooks: ``result`` and ``usage`` parsed. Unset fields are
        left out, but a completed job always has ``result`` (contract §3), also when its agent's output is null."""
        body = json_view(self)
        return {k: v for k, v in body.items() if v is not None or (k == "result" and self.status == Status.COMPLETED)}


class DeadLetter(BaseModel):
    """A request that can never complete, as kept on the dead stream (contract §3)."""

    model_config = ConfigDict(extra="ignore")

    entry_id: str | None = None
    id: str
    agent: str = ""
    reason: str
    error: str
    source_stream: str
    source_id: str  # the lane entry the producer wrote
    last_source_id: str | None = None  # the entry the job last ran from, when retries re-added it
    attempts: int = 0
    dead_at: int
    request: dict[str, str] = Field(default_factory=dict)

    def to_fields(self) -> dict[str, str]:
        fields = {
            "id": self.id, "agent": self.agent, "reason": self.reason, "error": self.error,
            "source_stream": self.source_stream, "source_id": self.source_id,
            "attempts": str(self.attempts), "dead_at": str(self.dead_at), "request": dumps(self.request),
        }
        if self.last_source_id is not None:
            fields["last_source_id"] = self.last_source_id
        return fields

    @classmethod
    def from_entry(cls, entry_id: str, raw: Mapping[str, str]) -> DeadLetter:
        raw = repaired_fields(raw)  # a hand-made letter's bytes that are not UTF-8: U+FFFD, so any JSON can show it
        values: dict[str, Any] = dict(raw)
        try:
            values["request"] = orjson.loads(raw.get("request", "{}"))
        except orjson.JSONDecodeError:
            values["request"] = {}
        values["entry_id"] = entry_id
        try:
            return cls.model_validate(values)
        except ValidationError as exc:  # not written by streamcrew (a hand-made XADD): listed as such, never failing the list
            return cls(entry_id=entry_id, id=str(raw.get("id", "")), agent=str(raw.get("agent", "")), reason=MALFORMED_LETTER,
                       error=f"not a dead letter streamcrew wrote: {_describe(exc)}", source_stream=str(raw.get("source_stream", "")),
                       source_id=str(raw.get("source_id", "")), dead_at=entry_ms(entry_id))
