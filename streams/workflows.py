"""Workflow runtime (contract §9): start claimed workflows, expire timed-out ones, read their steps.

A workflow entry is never "run": a worker validates its graph, then one call of
``wf_start.lua`` writes its state, publishes its runnable steps and acks it.
From then on it lives in Redis only: each step's settle does the fan-in
(``workflow.lua``, in the same call as the step's result), so no process has to
stay alive for a workflow to finish.

A workflow and its steps stay in the partition whose lane it was read from
(contract §10): its state, its steps' records and lane entries, its timeout
entry; every script call names only that partition's keys, one hash slot.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, cast

import orjson
from redis.asyncio import Redis

from streams import metrics
from streams.config import StreamSettings
from streams.entries import Release
from streams.envelope import JobRequest, dumps, flat
from streams.job_fields import producer_entry
from streams.job_ids import JOB_ID_RULE, is_valid_job_id
from streams.keys import Keys
from streams.raw import request_bytes
from streams.scripts import Scripts
from streams.sizes import bounded_error
from streams.workflow import WorkflowInvalid, WorkflowSpec, parse_workflow, step_job_id

log = logging.getLogger("streamcrew.workflows")

EXPIRE_BATCH = 100
START_STEPS = 200
Reject = Callable[[str, str, str, str, dict[str, str], str], None]


class StepChecker(Protocol):
    def check_step(self, agent: str, data: dict[str, Any]) -> str | None:
        """None when a step of ``agent`` with ``data`` can run, else why not (→ the workflow is rejected)."""


@dataclass(slots=True)
class ClaimedWorkflow:
    entry_id: str
    job_id: str
    request: JobRequest
    raw: dict[str, str]


class WorkflowStarter:
    """Starts workflows for one worker; ``reject`` ends an invalid one through the settler.

    Each call names the keys of one partition: the one the workflow's lane entry is in.
    """

    def __init__(self, redis: Redis, settings: StreamSettings, *, group: str, worker: str,
                 checker: StepChecker, reject: Reject, release: Release) -> None:
        self.settings = settings
        self.group = group
        self.worker = worker
        self.checker = checker
        self.reject = reject
        self.release = release
        self._scripts = Scripts(redis)

    def validate(self, request: JobRequest) -> WorkflowSpec:
        """The graph, and each step's agent and data as its agent checks them."""
        spec = parse_workflow(request.data)
        for s in spec.steps:
            try:
                problem = self.checker.check_step(s.agent, s.data)
            except Exception as exc:  # an input model's validator raising what pydantic passes on (AttributeError, ...):
                # let out, it failed the worker's whole batch read, again at every reclaim, so none of it ever ended
                problem = f"checking its input for agent {s.agent!r} raised {type(exc).__name__}: {exc}"
            if problem:
                raise WorkflowInvalid(bounded_error(f"step {s.id!r}: {problem}"))
        return spec

    async def start(self, keys: Keys, stream: str, lane: str, claimed: list[ClaimedWorkflow]) -> None:
        """Start the workflows claimed from ``stream``, a lane of the partition ``keys``."""
        batch: list[ClaimedWorkflow] = []
        plans: list[list[Any]] = []
        for c in claimed:
            try:
                spec = self.validate(c.request)
                _check_step_ids(c.job_id, spec)
                plan = self._plan(c, spec, lane, self.settings.max_request_bytes)
            except WorkflowInvalid as exc:
                self.reject(stream, lane, c.entry_id, c.job_id, c.raw, str(exc))
                continue
            except Exception as exc:  # the planner's own failure on a hostile one (step data past the 255 levels orjson
                # writes): that workflow is rejected; let out, it failed its whole batch's start at every reclaim
                log.error("workflow=%s: planning it failed (%s); it is rejected", c.job_id, type(exc).__name__, exc_info=True)
                self.reject(stream, lane, c.entry_id, c.job_id, c.raw, f"the workflow could not be planned: {type(exc).__name__}: {exc}")
                continue
            batch.append(c)
            plans.append(plan)
        # Chunks of about START_STEPS steps: one script call blocks Redis, so none may run long.
        start = 0
        while start < len(plans):
            end, size = start, 0
            while end < len(plans) and (end == start or size + len(plans[end][-1]) <= START_STEPS):
                size += len(plans[end][-1])
                end += 1
            await self._start_chunk(keys, stream, lane, batch[start:end], plans[start:end])
            start = end

    async def _start_chunk(self, keys: Keys, stream: str, lane: str, batch: list[ClaimedWorkflow], plans: list[list[Any]]) -> None:
        args: list[str | int] = [keys.job_prefix, keys.lane_prefix, lane, self.group, self.worker,
                                 self.settings.job_ttl_s, self.settings.max_result_bytes, orjson.dumps(plans).decode()]
        reply = await self._scripts.wf_start(keys=[stream, keys.results, keys.dead, keys.workflow_timeouts, keys.slot_guard], args=args)
        for c, plan, (decision, job_id, published) in zip(batch, plans, reply, strict=True):
            self.release(stream, c.entry_id)
            if decision == "completed":  # a resume with nothing left to run: ended here, at its start
                metrics.workflow_fanned_in("completed", 0)
            log.info("workflow=%s entry=%s outcome=%s steps=%d published=%d", job_id, c.entry_id, decision, len(plan[-1]), int(published))

    @staticmethod
    def _plan(c: ClaimedWorkflow, spec: WorkflowSpec, lane: str, max_request_bytes: int) -> list[Any]:
        """What wf_start.lua writes and publishes; raises WorkflowInvalid for a step whose request would pass
        ``max_request_bytes``: it carries the workflow's id twice (its id, its parent), so it may outgrow the workflow.
        The id counted is the longest the workflow can get: wf_start.lua names an id-less one '<lane>:<entry ID>'
        when its entry ID is another entry's job (the same ID in another lane)."""
        r = c.request
        longest = c.job_id if r.id else f"{lane}:{c.job_id}"
        kids = spec.dependents()
        steps = []
        for s in spec.steps:
            fields: dict[str, str] = {"agent": s.agent, "data": dumps(s.data)}
            for name, value in (("tenant", r.tenant), ("traceparent", r.traceparent),
                                ("max_attempts", s.max_attempts), ("timeout_s", s.timeout_s)):
                if value is not None:
                    fields[name] = str(value)
            size = request_bytes({**fields, "id": step_job_id(longest, s.id), "parent": longest, "step": s.id})
            if size > max_request_bytes:
                named = "" if r.id else f" as {longest!r}, its name should another lane's job hold its entry ID"
                raise WorkflowInvalid(f"step {s.id!r}: its request would be {size} bytes, over the {max_request_bytes}-byte limit "
                                      f"(STREAMCREW_MAX_REQUEST_BYTES; it holds the step's data, and the workflow's id twice{named})")
            steps.append([s.id, s.agent, len(s.after), dumps(s.after), dumps(kids[s.id]), dumps(flat(fields))])
        submitted = r.submitted_at or int(c.entry_id.split("-", 1)[0])
        return [c.entry_id, c.job_id, "1" if r.id else "0", str(submitted), spec.on_failure,
                "" if spec.timeout_s is None else str(spec.timeout_s), r.webhook or "", r.tenant or "",
                r.traceparent or "", dumps(c.raw), producer_entry(c.raw, c.entry_id), steps]

    async def expire_due(self, keys: Keys) -> int:
        """End every workflow of the partition ``keys`` whose ``timeout_s`` has passed (any worker may; the status
        fences repeats), in as many calls as their work takes (workflow.lua: WF_CALL_WORK), Redis free in between."""
        ended = 0
        more = True
        while more:
            reply = await self._scripts.wf_expire(
                keys=[keys.workflow_timeouts, keys.results, keys.dead, keys.slot_guard],
                args=[keys.job_prefix, keys.lane_prefix, self.settings.max_result_bytes,
                      self.settings.job_ttl_s, EXPIRE_BATCH, self.worker],
            )
            more = int(reply[0]) == 1
            for job_id, status, duration_ms in cast(list[list[Any]], reply[1]):
                metrics.workflow_fanned_in(str(status), int(duration_ms))
                log.info("workflow=%s outcome=%s seconds=%.3f", job_id, status, int(duration_ms) / 1000)
            ended += len(reply[1])
        return ended


async def get_steps(redis: Redis, keys: Keys, workflow_id: str) -> list[dict[str, Any]] | None:
    """A workflow's steps in order: ``{"id", "agent", "status", "job_id"}`` (+ ``error``), or None when unknown.

    ``keys`` are the workflow's partition's, which holds its steps' records too.

    A step the workflow has published shows its own job's live status (queued, running, retrying, ...). Each step's
    fields are read in one HMGET, and only a published step's record after: two commands a step made a 1,000-step
    workflow's read ~40 ms of replies to parse, every event stream opened on it waiting.
    """
    h = keys.workflow(workflow_id)
    order = await redis.hget(h, "order")
    if order is None:
        return None
    ids = cast(list[str], orjson.loads(order))
    if not ids:
        return []
    stored = cast(list[str | None], await redis.hmget(h, [f"{sid}|{part}" for sid in ids for part in ("st", "agent", "err")]))
    published = [sid for sid, st in zip(ids, stored[0::3], strict=True) if st == "queued"]
    live: dict[str, str | None] = {}
    if published:
        pipe = redis.pipeline(transaction=False)
        for sid in published:
            pipe.hget(keys.job(step_job_id(workflow_id, sid)), "status")
        live = dict(zip(published, await pipe.execute(), strict=True))
    steps = []
    for i, sid in enumerate(ids):
        st, agent, err = stored[3 * i:3 * i + 3]
        status = live.get(sid) or st
        step: dict[str, Any] = {"id": sid, "agent": agent, "status": status, "job_id": step_job_id(workflow_id, sid)}
        if err and status not in ("completed", "queued", "running"):
            step["error"] = err
        steps.append(step)
    return steps


def _check_step_ids(job_id: str, spec: WorkflowSpec) -> None:
    """Each step's job id (``<workflow id>::<step id>``) must be a job id itself: a step given another id would
    settle into no workflow, and the workflow would wait for it until its timeout, or for ever."""
    for s in spec.steps:
        if not is_valid_job_id(step_id := step_job_id(job_id, s.id)):
            raise WorkflowInvalid(f"step {s.id!r}: its job id '<workflow id>::{s.id}' ({len(step_id)} characters) is not a "
                                  f"job id ({JOB_ID_RULE}): shorten the workflow's id")
