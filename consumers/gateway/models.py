"""Request and response bodies of the HTTP API; they are what /openapi.json documents."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    StrictFloat,
    StrictInt,
    WithJsonSchema,
)

from consumers.webhook_targets import webhook_url_problem
from streams.envelope import MAX_ATTEMPTS, MAX_EPOCH_MS, MAX_TIMEOUT_S, JobResult, Status
from streams.job_ids import JOB_ID_MAX, JOB_ID_PATTERN, JOB_ID_RULE, reserved_id_problem
from streams.keys import LANES
from streams.request_checks import NAME_PATTERN
from streams.strict_json import encode_data

# One id alphabet everywhere (streams.envelope): ASCII safe in URL paths, Redis keys and webhook-id headers.
ID_PATTERN = JOB_ID_PATTERN
ENTRY_ID_PATTERN = r"^\d{1,19}-\d{1,19}$"
_ENTRY_ID = re.compile(ENTRY_ID_PATTERN)
_ID = re.compile(ID_PATTERN)


def _http_url(value: str) -> str:
    """Validate as an http(s) URL but keep the caller's spelling (pydantic would normalise it)."""
    if problem := webhook_url_problem(value):
        raise ValueError(problem)
    return value


def _priority(value: object) -> int | str:
    """One clear message instead of one per member of the union."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 10:
        return value
    if isinstance(value, str) and value in LANES:
        return value
    raise ValueError(f"priority must be one of {', '.join(LANES)} or an integer 0-10, got {value!r}")


def _job_id(value: str) -> str:
    """The id alphabet, minus the system's own id shapes (generated and step ids), so explicit ids never collide with them."""
    if not _ID.match(value):
        raise ValueError(f"job id must be {JOB_ID_RULE}")
    if problem := reserved_id_problem(value):
        raise ValueError(problem)
    return value


def _json_data(value: dict[str, Any]) -> dict[str, Any]:
    encode_data(value)
    return value


JobId = Annotated[str, Field(min_length=1, max_length=JOB_ID_MAX, json_schema_extra={"pattern": ID_PATTERN}), AfterValidator(_job_id)]
Priority = Annotated[
    int | str, PlainValidator(_priority),
    WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 0, "maximum": 10}, {"type": "string", "enum": list(LANES)}]}),
]
WebhookUrl = Annotated[str, Field(min_length=1, max_length=2048, json_schema_extra={"format": "uri"}), AfterValidator(_http_url)]


def is_entry_id(value: str) -> bool:
    return bool(_ENTRY_ID.fullmatch(value))


class JobSubmission(BaseModel):
    """POST /jobs: one request for an agent (contract §2 and §6)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"agent": "echo", "data": {"hello": "world"}, "priority": "high", "id": "ORD-12345-status"}]},
    )

    agent: Annotated[str, Field(min_length=1, max_length=200, pattern=NAME_PATTERN, description="registered agent name")]
    data: Annotated[dict[str, Any], AfterValidator(_json_data)] = Field(
        description="the agent's input, a JSON object (no NaN or Infinity; integers within 64 bits)")
    priority: Priority | None = Field(default=None, description="lane name, or 0-10 (7-10 high, 4-6 normal, 0-3 low); default: a priority 0-10 in data (or data.data), else normal")
    webhook: WebhookUrl | None = Field(default=None, description="http(s) URL the notifier POSTs the result to")
    id: JobId | None = Field(default=None, description="job id and idempotency key; default: the stream entry ID")
    tenant: Annotated[str, Field(min_length=1, max_length=200, pattern=NAME_PATTERN)] | None = Field(
        default=None, description="tenant id; a tenant-bound API key sets it")
    max_attempts: Annotated[StrictInt, Field(ge=1, le=MAX_ATTEMPTS)] | None = Field(default=None, description="attempts before the job fails")
    timeout_s: Annotated[StrictFloat, Field(gt=0, le=MAX_TIMEOUT_S)] | None = Field(default=None, description="seconds one attempt may run")
    deadline: Annotated[StrictInt, Field(ge=0, le=MAX_EPOCH_MS)] | None = Field(
        default=None, description="epoch ms (at most year 9999); a job not started by then ends expired")


class TaskSubmission(BaseModel):
    """POST /tasks: the second design's request, a query for the ``ask`` agent (contract §13)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"query": "Explain async programming", "user_id": "user-001", "priority": "normal"}]},
    )

    query: str = Field(min_length=1, max_length=100_000, description="the prompt the ask agent answers")
    user_id: Annotated[str, Field(min_length=1, max_length=200, pattern=NAME_PATTERN)] | None = Field(
        default=None, description="the job's tenant (as tenant in POST /jobs); a tenant-bound key sets it")
    priority: Priority | None = Field(default=None, description="high, normal, low or 0-10; default normal")
    webhook: WebhookUrl | None = Field(default=None, description="http(s) URL the notifier POSTs the result to")


class Links(BaseModel):
    self: str
    result: str
    events: str


class JobAccepted(BaseModel):
    """202: the job is queued."""

    job_id: str
    status: Status
    lane: str | None = None
    links: Links


class WorkflowStepView(BaseModel):
    """One step of a workflow as its record lists it."""

    id: str
    agent: str | None = None
    status: str
    job_id: str
    error: str | None = None


class JobView(BaseModel):
    """A job's status record (contract §4)."""

    job_id: str
    status: Status
    agent: str = ""
    attempts: int = 0
    lane: str | None = None
    submitted_at: int | None = None
    started_at: int | None = Field(default=None, description="when a worker first picked the job up")
    attempt_started_at: int | None = Field(default=None, description="when the latest attempt started")
    finished_at: int | None = None
    worker: str | None = None
    result: Any = None
    error: str | None = None
    usage: dict[str, Any] | None = None
    webhook: str | None = None
    tenant: str | None = None
    traceparent: str | None = None
    parent: str | None = Field(default=None, description="a workflow step: the workflow's id")
    step: str | None = Field(default=None, description="a workflow step: its step id")
    steps_total: int | None = Field(default=None, description="a workflow: how many steps it has")
    steps_done: int | None = Field(default=None, description="a workflow: how many steps have settled (ended or skipped)")
    steps: list[WorkflowStepView] | None = Field(default=None, description="a workflow: its steps in order, with their status")
    parked: bool | None = Field(default=None, description="true while the job (queued or retrying) waits because its tenant has "
                                "STREAMCREW_TENANT_MAX_RUNNING jobs running; absent otherwise")
    links: Links


class JobTimes(BaseModel):
    """GET /jobs/{id}/status: the second design's view of a job, times in ISO 8601 (null until reached)."""

    job_id: str
    status: Status
    queued_at: datetime | None = Field(description="when a producer accepted the job")
    started_at: datetime | None = Field(description="when a worker picked it up")
    completed_at: datetime | None = Field(description="when it ended (completed, failed, rejected or expired)")


# The result event as the results stream and webhooks carry it (contract §3), ``result`` and ``usage`` parsed.
JobResultView = JobResult


class ConsumerStats(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    pending: int
    idle_s: float


class StreamStats(BaseModel):
    model_config = ConfigDict(extra="allow")

    stream: str
    group: str
    length: int
    pending: int
    lag: int | None = Field(description="entries not yet delivered to the group (Redis >= 7); the length where group_missing")
    group_missing: bool = Field(False, description="the stream exists without its group (deleted: XGROUP DESTROY); its lag "
                                "counts every entry, which a worker delivers once it makes the group again at ID 0")
    group_missing_partitions: list[int] | None = Field(None, description="summed over partitions: those whose stream lacks the group")
    last_delivered_id: str | None = None
    oldest_pending_age_s: float | None
    consumers: list[ConsumerStats]


class WebhookStats(BaseModel):
    model_config = ConfigDict(extra="allow")

    dead_letters: int
    retrying: int


class Window(BaseModel):
    size: int = Field(description="results asked for (?window=, default 1000)")
    results: int = Field(description="results found in the window")
    oldest_finished_at: int | None = Field(description="epoch ms")
    newest_finished_at: int | None = Field(description="epoch ms")


class Spread(BaseModel):
    """Milliseconds: average and nearest-rank percentiles; null without data."""

    avg: float | None
    p50: int | None
    p95: int | None
    p99: int | None


class Spend(BaseModel):
    results: int
    tokens: int
    cost_usd: float | None = Field(description="sum of the known costs; null when all LLM use was unpriced")
    unpriced: int = Field(description="results with usage but no known price")


class QueueStats(BaseModel):
    """The figures of ``streamcrew stats --json``; from ``window`` on, over the latest results (contract §12)."""

    model_config = ConfigDict(extra="allow")

    prefix: str
    lanes: dict[str, StreamStats]
    results: StreamStats
    dead_letters: int
    retrying: int
    parked: int = Field(description="jobs parked over their tenant's STREAMCREW_TENANT_MAX_RUNNING, waiting for a free slot")
    parked_by_tenant: dict[str, int] = Field(
        description="the 20 tenants with the most parked jobs -> how many, most first (with partitions: each partition's 20, summed)")
    resumed: int = Field(description="jobs let go from a tenant's parked list or handed back by a draining worker, not yet read "
                               "(their lane's resumed stream, read just before the lane)")
    resumed_running: int = Field(description="jobs running that were read from a resumed stream")
    webhooks: WebhookStats
    window: Window
    completed: int
    failed: int
    rejected: int
    expired: int
    latency_ms: Spread = Field(description="submitted to finished, completed results")
    queue_wait_ms: Spread = Field(description="submitted to started, every result that started")
    tokens: int
    cost_usd: float = Field(description="sum of the known costs")
    unpriced: int = Field(description="results with usage but no known price (cost_usd null)")
    by_model: dict[str, Spend]
    by_tenant: dict[str, Spend] = Field(description="results that carry a tenant")


class DeadLetterView(BaseModel):
    entry_id: str
    id: str
    agent: str
    reason: str
    error: str
    source_stream: str
    source_id: str = Field(description="the lane entry the producer wrote")
    last_source_id: str | None = Field(default=None, description="the entry the job last ran from (a retry re-adds it)")
    attempts: int
    dead_at: int
    request: dict[str, str]


class DeadLetterPage(BaseModel):
    dead_letters: list[DeadLetterView]
    next_after: str | None = Field(description="pass as ?after= for the next page; null on the last page")


class Replayed(BaseModel):
    """202: the dead letter's job is back in its lane."""

    entry_id: str
    job_id: str
    status: Status
    links: Links


class Purged(BaseModel):
    """How many dead letters were deleted."""

    purged: int


class BulkReplayed(BaseModel):
    """202: these jobs are back in their lanes; ``skipped`` says why the others are not."""

    replayed: list[str] = Field(description="job ids sent back to their lanes")
    skipped: list[str] = Field(description="one reason per dead letter that could not be replayed")


class WebhookDeadLetterView(BaseModel):
    """A webhook delivery that exhausted its attempts, got 410 Gone, or was refused (contract §7)."""

    entry_id: str
    id: str
    url: str
    attempts: int
    last_status: int | None = None
    error: str
    dead_at: int
    event: Any = None


class WebhookDeadLetterPage(BaseModel):
    dead_letters: list[WebhookDeadLetterView]
    next_after: str | None = Field(description="pass as ?after= for the next page; null on the last page")


class WebhookReplayed(BaseModel):
    """202: these webhook dead letters are queued for delivery again."""

    replayed: list[str] = Field(description="webhook dead-letter entry IDs queued again")
    skipped: list[str]


class Health(BaseModel):
    status: str
