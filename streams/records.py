"""Job status records (``<prefix>:job:<id>``), read side; the Lua scripts write them."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar, cast

from pydantic import BaseModel, ConfigDict, ValidationError
from redis.asyncio import Redis

from streams.envelope import TERMINAL, JobResult, Status
from streams.keys import Keys, keys_for_job
from streams.strict_json import parsed_json
from streams.workflow import WORKFLOW_AGENT
from streams.workflows import get_steps

# The record's fields only the scripts read: which entry owns the job, the attempts before a replay, the delay a pending
# retry was written with (settle.lua tells a resent call from another ending of the same attempt by it)
INTERNAL_FIELDS = frozenset({"source", "base", "retry_delay"})
PARKED_SOURCE = "parked:"  # the source tenant_cap.lua gives a job it parks (the item's hash follows)
STATUSES = frozenset(Status)


class JobRecord(BaseModel):
    """The status of one job as users see it (contract §4)."""

    model_config = ConfigDict(extra="ignore")

    id: str
    status: str
    agent: str = ""
    attempts: int = 0
    lane: str | None = None
    submitted_at: int | None = None
    started_at: int | None = None
    attempt_started_at: int | None = None
    finished_at: int | None = None
    worker: str | None = None
    result: Any = None
    error: str | None = None
    usage: dict[str, Any] | None = None
    webhook: str | None = None
    tenant: str | None = None
    traceparent: str | None = None
    parent: str | None = None
    step: str | None = None
    steps_total: int | None = None
    steps_done: int | None = None
    steps: list[dict[str, Any]] | None = None
    parked: bool | None = None  # True while it waits over its tenant's cap (streams.tenant_cap); read from its source

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def as_result(self) -> JobResult:
        """The job's result event, rebuilt from the record (identical fields). The result is handed on as it is, not
        dumped: pydantic's dump copies it item by item (0.86 MiB of empty lists: ~60 ms, twice its parse)."""
        fields = self.model_dump(exclude={"lane", "attempt_started_at", "steps", "steps_total", "steps_done", "parked", "result"})
        return JobResult.model_validate({**fields, "result": self.result})


class JobHead(BaseModel):
    """What a read that shows neither result nor steps needs of a record (GET /jobs/{id}/status, an event stream's
    polls, the tenant check before a full read). Each field reads as JobRecord's of that name."""

    model_config = ConfigDict(extra="ignore")

    id: str
    status: str
    attempts: int = 0
    submitted_at: int | None = None
    started_at: int | None = None
    finished_at: int | None = None
    tenant: str | None = None
    steps_total: int | None = None
    steps_done: int | None = None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL


HEAD_FIELDS = tuple(name for name in JobHead.model_fields if name != "id")
R = TypeVar("R", JobRecord, JobHead)


def _parse(job_id: str, raw: dict[str, str]) -> JobRecord | None:
    """The record, or None when its status is missing or none the scripts write (a raw writer's HSET): no job's
    status to show (a 500 before, for every caller, which told another tenant's key that the id is stored).
    publish.lua takes a record without status for none too: a POST with its id writes over it."""
    if raw.get("status") not in STATUSES:
        return None
    values: dict[str, Any] = {k: v for k, v in raw.items() if k not in INTERNAL_FIELDS}
    values["parked"] = True if str(raw.get("source", "")).startswith(PARKED_SOURCE) and raw.get("status") in ("queued", "retrying") else None
    for name in ("result", "usage"):
        if name in values:
            values[name] = parsed_json(values[name])  # the stored text when it is no JSON, or too deep to write back
    values["id"] = job_id
    return _validated(JobRecord, values)


def _validated(model: type[R], values: dict[str, Any]) -> R:
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        # A field a raw writer (HSET) stored not of its type reads as unset: the rest of the record still reads
        # (id and status are strings, checked above).
        bad = {e["loc"][0] for e in exc.errors() if e["loc"]}
        return model.model_validate({k: v for k, v in values.items() if k not in bad})


# What a caller may wrap a record's parse in, given the characters of its JSON fields (a gateway lets large ones take turns)
ParseTurn = Callable[[int], AbstractAsyncContextManager[None]]


def _no_turn(size: int) -> AbstractAsyncContextManager[None]:
    return contextlib.nullcontext()


async def get_job(redis: Redis, keys: Keys, job_id: str, *, partitions: int = 1, turn: ParseTurn = _no_turn) -> JobRecord | None:
    """The record of ``job_id``, or None when unknown (or expired, or without a known status); with partitions, found
    by its id alone. Its parse runs inside ``turn(size)``, ``size`` the characters of its result and usage: what the parse
    costs grows with them (0.86 MiB of empty lists: ~30 ms of a process's only thread)."""
    job_keys = keys_for_job(keys, partitions, job_id)
    raw = cast(dict[str, str], await redis.hgetall(job_keys.job(job_id)))
    if not raw:
        return None
    async with turn(len(raw.get("result", "")) + len(raw.get("usage", ""))):
        record = _parse(job_id, raw)
    if record is None:
        return None
    if record.agent == WORKFLOW_AGENT:
        record.steps = await get_steps(redis, job_keys, job_id)
    return record


async def get_job_head(redis: Redis, keys: Keys, job_id: str, *, partitions: int = 1) -> JobHead | None:
    """The head of ``job_id``'s record, or None where get_job gives None. One HMGET of its fields: the result (of
    any size: 0.86 MiB of empty lists took ~0.12 s to parse) is neither fetched nor parsed, nor a workflow's steps read."""
    stored = await redis.hmget(keys_for_job(keys, partitions, job_id).job(job_id), HEAD_FIELDS)
    raw = {name: value for name, value in zip(HEAD_FIELDS, stored, strict=True) if value is not None}
    if raw.get("status") not in STATUSES:
        return None
    return _validated(JobHead, {**raw, "id": job_id})


async def wait_for_terminal(
    redis: Redis, keys: Keys, job_id: str, *, timeout_s: float, poll_s: float = 0.05, partitions: int = 1,
) -> JobRecord | None:
    """Poll the record until the job ends or ``timeout_s`` passes; returns the last record seen."""
    deadline = time.monotonic() + timeout_s
    record = await get_job(redis, keys, job_id, partitions=partitions)
    while (record is None or not record.terminal) and time.monotonic() < deadline:
        await asyncio.sleep(poll_s)
        poll_s = min(poll_s * 1.5, 0.5)
        record = await get_job(redis, keys, job_id, partitions=partitions)
    return record
