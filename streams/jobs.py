"""Job semantics on top of the group runtime: start, run, retry, dead-letter, settle.

The worker supplies a :class:`JobExecutor` (agents live above this package);
everything here is about the request's life in Redis, fenced so that each job
yields exactly one result event whatever crashes, reclaims or duplicates occur.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
from redis.asyncio import Redis

from streams import metrics
from streams.config import StreamSettings
from streams.envelope import NOT_STARTED_IN_TIME, JobRequest, Status, dumps, entry_ms, epoch_ms_or, flat, now_ms, result_fields
from streams.job_counts import count_ending, count_retry
from streams.job_fields import dead_letter_fields, explicit_id, readded_fields
from streams.raw import repaired_fields
from streams.errors import AgentFailed, DecodeError, Reject, RetryLater, refusal
from streams.forward import Forwarder, home_partition
from streams.hold import until_refill
from streams.keys import Keys, lane_of, partition_keys
from streams.outage import until_redis_answers
from streams.runtime import Entry, GroupRuntime, Slot
from streams.scripts import Scripts
from streams.settle import Settler, done_op, drop_op, handback_op, retry_op
from streams.superseded import runs_ended_elsewhere
from streams.tenant_cap import TenantCapper, TenantCaps
from streams.sizes import bounded_error, short, too_large
from streams.slow_slots import slow_slots_of
from streams.tally import JobTally
from streams.upkeep import Upkeep, UpkeepLease
from streams.usage import add as add_usage, of_failure, parse as parse_usage, stored as stored_usage
from streams.workflow import WORKFLOW_AGENT
from streams.workflows import ClaimedWorkflow, WorkflowStarter

log = logging.getLogger("streamcrew.jobs")

UNKNOWN_AGENT_LABEL = "_unknown"
SUMMARY_EVERY_S = 10.0
RECLAIM_IDS_LOGGED = 10  # job ids named in a reclaim line; the count says how many more


class JobExecutor(Protocol):
    """What the worker plugs in: agent lookup, attempt budget and the call itself."""

    def check(self, request: JobRequest) -> str | None:
        """None when this worker can run the request, else why it cannot (→ rejected)."""

    def max_attempts(self, request: JobRequest) -> int: ...

    def check_step(self, agent: str, data: dict[str, Any]) -> str | None:
        """None when a workflow step of ``agent`` with ``data`` can run, else why not (→ the workflow is rejected)."""

    async def execute(self, request: JobRequest, job_id: str, attempt: int, max_attempts: int) -> tuple[Any, dict[str, Any] | None]:
        """Run one attempt; returns ``(output, usage)``; raises to fail the attempt (its usage attached: streams.usage)."""


@dataclass(slots=True)
class Claimed:
    stream: str
    lane: str
    entry_id: str
    job_id: str
    request: JobRequest
    raw: dict[str, str]
    max_attempts: int
    submitted_at: int
    origin: str  # the stream's name in the record's source: the lane's, or its resumed stream's (streams.keys.RESUMED)

    @property
    def source(self) -> str:
        return f"{self.origin}/{self.entry_id}"


@dataclass(slots=True)
class Running:
    claimed: Claimed
    attempt: int
    used: int
    started_at: int
    usage_before: dict[str, Any] | None = None  # the earlier attempts' (streams.usage)
    first_start: bool = False  # the job's first start (start.lua wrote started_at now): its queue wait is observed


class JobProcessor:
    """The :class:`~streams.runtime.EntryHandler` of the ``workers`` group.

    Logging at INFO: one summary line every ``summary_every_s`` (attempts by outcome, rate, p95) and
    one line per retry, dead letter and reclaim; the line per attempt is at DEBUG.
    """

    def __init__(
        self, redis: Redis, keys: Keys, settings: StreamSettings, runtime: GroupRuntime, executor: JobExecutor,
        *, summary_every_s: float = SUMMARY_EVERY_S, partitions: tuple[Keys, ...] | None = None, caps: TenantCaps | None = None,
    ) -> None:
        """``caps``: STREAMCREW_TENANT_MAX_RUNNING (streams.tenant_cap); None = no tenant is capped."""
        self.redis = redis
        self.keys = keys
        self.partitions = partitions or (keys,)
        self._keys_of = {stream: k for k in self.partitions for stream in k.work_streams}
        self.settings = settings
        self.runtime = runtime
        self.executor = executor
        self.worker = runtime.consumer
        self._scripts = Scripts(redis)
        self.caps = TenantCapper(self._scripts, caps, partitions=settings.partitions, lease_s=runtime.lease_s,
                                 worker=self.worker, home=partition_keys(keys, settings.partitions)[0], slow=slow_slots_of(redis))
        self.settler = Settler(redis, self.partitions, group=runtime.group, max_result_bytes=settings.max_result_bytes,
                               job_ttl_s=settings.job_ttl_s, release=runtime.release, replica_acks=settings.replica_acks,
                               hold=until_refill(runtime), hold_s=runtime.refill_wait_s / 2)
        self.workflows = WorkflowStarter(redis, settings, group=runtime.group, worker=self.worker, checker=executor,
                                         reject=self._reject_invalid, release=runtime.release)
        self._forwarder = Forwarder(redis, keys, settings.partitions, max_request_bytes=settings.max_request_bytes,
                                    moved=lambda stream, entry_id: self.settler.submit(drop_op(stream, entry_id)), refused=self._reject_invalid,
                                    failed=lambda stream, entry_id: runtime.release(stream, entry_id, settled=False))
        self._running: dict[Slot, Running] = {}
        self.upkeep_lease = UpkeepLease(self._scripts, self.worker)  # let go by the worker once stopped (streams.upkeep)
        self._upkeep = Upkeep(self._scripts, self.workflows, settings, self.partitions, self.upkeep_lease, self.caps,
                              slow_slots_of(redis) if len(self.partitions) > 1 else None)
        self._tally = JobTally()
        self._summary_every_s = summary_every_s
        runtime.handler = self

    # -- entries in ----------------------------------------------------------

    async def on_entries(self, stream: str, entries: list[Entry], *, reclaimed: bool) -> None:
        origin = self.keys.lane_name(stream)  # what the record's source names; the lane it is for, below
        lane = lane_of(origin)
        if reclaimed:
            metrics.reclaimed(lane).inc(len(entries))
            ids = [explicit_id(raw) or self._keys_of[stream].generated_id(eid) for eid, raw in entries if raw is not None]
            log.warning("reclaimed %d %s entries idle past the lease (their consumer died or hung): jobs %s%s", len(entries), lane,
                        ", ".join(ids[:RECLAIM_IDS_LOGGED]), f" and {len(ids) - RECLAIM_IDS_LOGGED} more" if len(ids) > RECLAIM_IDS_LOGGED else "")
        claimed: list[Claimed] = []
        workflows: list[ClaimedWorkflow] = []
        keys = self._keys_of[stream]
        for entry_id, raw in entries:
            if raw is None:  # deleted while pending (Redis 6.2 XAUTOCLAIM reports it as nil)
                self.settler.submit(drop_op(stream, entry_id))
                continue
            job_id = explicit_id(raw) or keys.generated_id(entry_id)
            try:
                request = self._read(raw, job_id)
                if home_partition(keys, self.settings.partitions, raw, request) is not None and not await self.redis.exists(keys.job(job_id)):
                    self._move(stream, lane, entry_id, job_id, raw, request)  # streams.forward; a record here keeps it here
                    continue
                if request.agent == WORKFLOW_AGENT:
                    if (request.deadline is None or request.deadline > await self._redis_now()
                            or await self._started_in_time(keys, origin, entry_id, job_id)):
                        workflows.append(ClaimedWorkflow(entry_id, job_id, request, raw))
                        continue
                    # past its deadline, never started: start.lua (with _start's later now) ends it expired (contract §2)
                elif problem := self._check(request, raw, job_id):
                    raise DecodeError(problem, raw)
            except DecodeError as exc:
                self._reject_invalid(stream, origin, entry_id, job_id, raw, exc.reason)
                continue
            submitted = request.submitted_at or entry_ms(entry_id)
            attempts = 1 if request.agent == WORKFLOW_AGENT else self.executor.max_attempts(request)  # one that only expires
            claimed.append(Claimed(stream, lane, entry_id, job_id, request, raw, attempts, submitted, origin))
        if workflows:
            await self.workflows.start(keys, stream, origin, workflows)
        if claimed:
            await self._start(stream, origin, claimed)

    def _read(self, raw: dict[str, str], job_id: str) -> JobRequest:
        """The request, or a DecodeError: never another exception, which failed the start of the whole batch."""
        try:
            return JobRequest.from_fields(raw, max_bytes=self.settings.max_request_bytes, max_inputs_bytes=self.settings.max_result_bytes)
        except DecodeError:
            raise
        except Exception as exc:  # '²' as submitted_at, say: a digit to str.isdigit, not to int()
            raise refusal(raw, "validation", job_id, exc) from None

    def _check(self, request: JobRequest, raw: dict[str, str], job_id: str) -> str | None:
        """The agent's word on the request's input; an exception of its check refuses the request, as :meth:`_read`."""
        try:
            return self.executor.check(request)
        except Exception as exc:
            raise refusal(raw, f"agent {request.agent!r}'s input check", job_id, exc) from None

    async def _redis_now(self) -> int:
        """Redis' clock in epoch ms, which deadlines go by (start.lua's too): workers' own clocks may differ."""
        seconds, micros = await self.redis.time()
        return int(seconds) * 1000 + int(micros) // 1000

    async def _started_in_time(self, keys: Keys, origin: str, entry_id: str, job_id: str) -> bool:
        """Whether this entry is a replay of a workflow that started before its deadline: it resumes, as a job that
        started in time runs again (start.lua); taken for an unstarted one, it was run as an agent named 'workflow'."""
        started_at, source = await self.redis.hmget(keys.job(job_id), ["started_at", "source"])
        return started_at is not None and source == f"{origin}/{entry_id}"

    def _move(self, stream: str, lane: str, entry_id: str, job_id: str, raw: dict[str, str], request: JobRequest) -> None:
        """An entry XADDed into a partition its id does not belong to: published again in its own (streams.forward)."""
        move = self._forwarder.start(stream, lane, entry_id, job_id, raw, request,
                                     submitted_at=request.submitted_at or entry_ms(entry_id), found_in=self._keys_of[stream].partition or 0)
        self.runtime.attach(stream, entry_id, move)

    async def _start(self, stream: str, origin: str, claimed: list[Claimed]) -> None:
        now = now_ms()
        entries = [
            (c.entry_id, c.job_id, c.request.agent, str(c.submitted_at), str(c.max_attempts),
             "" if c.request.deadline is None else str(c.request.deadline), "1" if c.request.id else "0",
             c.request.tenant or "", c.request.webhook or "", c.request.traceparent or "",
             *((str(cap), flat(readded_fields(c.raw, c.job_id, c.submitted_at, c.entry_id))) if (cap := self.caps.cap(c.request)) else ()))
            for c in claimed
        ]
        args: list[str | int] = [self._keys_of[stream].job_prefix, origin, now, self.worker, orjson.dumps(entries).decode()]
        if self.caps.caps is not None:
            args.append(self.caps.hold_ms)
        reply = await self._start_call([stream, self._keys_of[stream].slot_guard], args)
        for c, (decision, attempts, used, job_id, first_started, before) in zip(claimed, reply, strict=True):
            attempts, used, c.job_id = int(attempts), int(used), str(job_id)
            if decision == "run":
                started = int(first_started or now)
                # Not attempt 1: a hand-back uncounts its attempt, and the next start would observe the queue wait again.
                run = Running(c, attempts, used, started, parse_usage(before), first_start=started == now)
                self._running[(stream, c.entry_id)] = run
                self.runtime.attach(stream, c.entry_id, asyncio.create_task(self._run(run)))
            elif decision == "parked":  # its tenant's cap is reached: its ending frees a slot (streams.tenant_cap)
                log.debug("job=%s entry=%s tenant=%s outcome=parked", c.job_id, c.entry_id, c.request.tenant)
                self.settler.submit(drop_op(stream, c.entry_id))
            elif decision == "dup":
                log.debug("job=%s entry=%s outcome=duplicate (already owned or ended)", c.job_id, c.entry_id)
                self.settler.submit(drop_op(stream, c.entry_id))
            elif decision == "exhausted":
                error = f"attempts exhausted: {used} of {c.max_attempts} used (worker crashes and reclaims count)"
                self._finish(c, Status.FAILED, attempts=attempts, started_at=int(first_started) if first_started else None,
                             usage=parse_usage(before), error=error, dead_reason="exhausted")
            else:
                self._finish(c, Status.EXPIRED, attempts=attempts, started_at=None, error=NOT_STARTED_IN_TIME, dead_reason="expired")

    async def _start_call(self, keys: list[str], args: list[str | int]) -> Any:
        """start.lua, sent again with the same arguments while Redis is down: a call whose every copy went unanswered
        may have run, and start.lua knows its own earlier run only by this worker and this ``now``. Tried again with a
        later ``now`` (the read loop's retry of the whole batch), it counted a second attempt, and a job allowed one
        ended ``exhausted`` without ever running."""
        return await until_redis_answers(f"{self.runtime.group}/{self.worker} start", lambda: self._scripts.start(keys=keys, args=args))

    # -- one attempt ---------------------------------------------------------

    async def _run(self, run: Running) -> None:
        c = run.claimed
        agent = c.request.agent
        if run.first_start:
            metrics.queue_wait(agent, c.lane).observe(max(0.0, (run.started_at - c.submitted_at) / 1000))
        metrics.in_flight(agent)
        metrics.RUNNING[agent] += 1
        t0 = time.perf_counter()
        outcome = "completed"
        seconds = 0.0

        def report(wrote: bool) -> None:
            """Logged once the settlement is written: an ending the fence turned away is ``fenced`` (INFO, it is rare
            and telling); every other attempt's line is DEBUG (the summary line counts them at INFO)."""
            if not wrote:
                log.info("job=%s agent=%s lane=%s attempt=%d outcome=fenced seconds=%.3f", c.job_id, agent, c.lane, run.attempt, seconds)
            elif log.isEnabledFor(logging.DEBUG):
                log.debug("job=%s agent=%s lane=%s attempt=%d outcome=%s seconds=%.3f", c.job_id, agent, c.lane, run.attempt, outcome, seconds)

        try:
            output, spent = await self.executor.execute(c.request, c.job_id, run.attempt, c.max_attempts)
            outcome = self._finish(c, Status.COMPLETED, attempts=run.attempt, started_at=run.started_at, result=output,
                                   usage=add_usage(run.usage_before, spent), report=report).value  # failed: too_large, unencodable
        except asyncio.CancelledError as exc:
            if not _being_cancelled():  # the agent's own (it awaited a task cancelled under it): a failed attempt
                outcome = self._fail_or_retry(run, f"CancelledError raised by the agent (its job was not cancelled) {exc}".rstrip(), exc, report=report)
            else:
                outcome = "cancelled"  # handed back by the drain: its calls were paid, the next attempt adds to them
                run.usage_before = add_usage(run.usage_before, of_failure(exc))
                raise
        except Reject as exc:
            outcome = "rejected"
            self._finish(c, Status.REJECTED, attempts=run.attempt, started_at=run.started_at, error=exc.reason, dead_reason="rejected",
                         usage=add_usage(run.usage_before, of_failure(exc)), report=report)
        except RetryLater as exc:
            outcome = self._fail_or_retry(run, exc.reason, exc, delay_s=exc.delay_s, report=report)
        except TimeoutError as exc:
            limit = c.request.timeout_s
            outcome = self._fail_or_retry(run, f"attempt timed out after {limit}s" if limit else "attempt timed out", exc, report=report)
        except Exception as exc:  # an agent failure is data, not a crash of the worker
            said = str(exc) if isinstance(exc, AgentFailed) else f"{type(exc).__name__}: {exc}"
            outcome = self._fail_or_retry(run, said, exc, report=report)
        finally:
            seconds = time.perf_counter() - t0
            metrics.RUNNING[agent] -= 1
            metrics.duration(agent).observe(seconds)
            if outcome == "cancelled":  # handed back by the drain, which needs it; no settlement to wait for
                report(True)
            else:
                self._running.pop((c.stream, c.entry_id), None)
            self._tally.add("retry" if outcome.startswith("retry") else outcome, seconds)

    def _fail_or_retry(self, run: Running, error: str, exc: BaseException, *, delay_s: float | None = None,
                       report: Callable[[bool], None] | None = None) -> str:
        c = run.claimed
        error = bounded_error(error)
        so_far = add_usage(run.usage_before, of_failure(exc))  # the failed attempt's calls count too
        if run.used >= c.max_attempts:
            self._finish(c, Status.FAILED, attempts=run.attempt, started_at=run.started_at, usage=so_far,
                         error=f"{error} (attempt {run.used} of {c.max_attempts})", dead_reason="exhausted", report=report)
            return "failed"
        if delay_s is None:
            base = self.settings.retry_backoff_s * (2 ** (run.used - 1))
            delay_s = min(self.settings.retry_backoff_max_s, base) * random.uniform(0.5, 1.0)
        fields = readded_fields(c.raw, c.job_id, c.submitted_at, c.entry_id)
        member = dumps({"lane": c.lane, "id": c.job_id, "fields": fields})
        log.info("job=%s agent=%s retry in %.2fs after attempt %d of %d: %s", c.job_id, c.request.agent, delay_s, run.used, c.max_attempts, short(error))
        op = retry_op(c.stream, c.entry_id, c.source, c.job_id, int(delay_s * 1000), member, error, stored_usage(so_far),
                      cap=self.caps.op_info(c.request))
        op.on_written = count_retry(c.request.agent, report)
        self.settler.submit(op)
        return f"retry_in_{delay_s:.2f}s"

    # -- endings -------------------------------------------------------------

    def _finish(
        self, c: Claimed, status: Status, *, attempts: int, started_at: int | None,
        result: Any = None, usage: dict[str, Any] | None = None, error: str | None = None, dead_reason: str | None = None,
        report: Callable[[bool], None] | None = None,
    ) -> Status:
        """Submit the job's ending; returns the status it ends with (an output too large or not JSON fails it)."""
        r = c.request
        finished = now_ms()
        error = None if error is None else bounded_error(error)
        try:
            event = result_fields(
                c.job_id, r.agent, status, attempts, result=result, error=error, submitted_at=c.submitted_at, started_at=started_at,
                finished_at=finished, worker=self.worker, usage=usage, webhook=r.webhook, tenant=r.tenant,
                traceparent=r.traceparent, parent=r.parent, step=r.step,
            )
        except orjson.JSONEncodeError as exc:  # a TypeError: only the agent's output is not the worker's own to encode
            if status != Status.COMPLETED:
                raise
            error = f"the agent's output ({type(result).__name__}) could not be encoded as JSON: {exc}; not retried"
            return self._finish(c, Status.FAILED, attempts=attempts, started_at=started_at, usage=usage, error=error,
                                dead_reason="unencodable", report=report)  # raised in _run, it was retried: each run paid, each failed alike
        if status == Status.COMPLETED and (size := too_large(event["result"], self.settings.max_result_bytes)):
            error = f"result is {size} bytes, over the {self.settings.max_result_bytes}-byte limit (STREAMCREW_MAX_RESULT_BYTES)"
            return self._finish(c, Status.FAILED, attempts=attempts, started_at=started_at, usage=usage, error=error,
                                dead_reason="too_large", report=report)  # not retried: an agent's answer to the same input
        dead = None
        if dead_reason:
            dead = dead_letter_fields(c.job_id, r.agent, dead_reason, error or "", c.stream, c.entry_id, attempts, c.raw, finished)
        op = done_op(c.stream, c.entry_id, c.source, c.job_id, event, dead, parent=r.parent, step=r.step, cap=self.caps.op_info(r))
        op.on_written = count_ending(r.agent, str(status), dead_reason, c.job_id, error, workflow=r.agent == WORKFLOW_AGENT, report=report)
        self.settler.submit(op)
        return status

    def _reject_invalid(self, stream: str, origin: str, entry_id: str, job_id: str, raw: dict[str, str], reason: str) -> None:
        finished = now_ms()
        reason = bounded_error(reason)  # a list of every problem of a 1,000-step workflow ran to 69,000 characters
        raw = repaired_fields(raw)  # bytes that were not UTF-8 become U+FFFD: the dead letter keeps the rest as sent
        agent = raw.get("agent", "")
        submitted = epoch_ms_or(raw.get("submitted_at", ""), entry_ms(entry_id))  # '²' is a digit to str.isdigit, not to int()
        fields = {"id": job_id, "agent": agent, "status": "rejected", "error": reason, "attempts": "0",
                  "submitted_at": str(submitted),
                  "finished_at": str(finished), "worker": self.worker}
        for name in ("webhook", "tenant", "traceparent", "parent", "step"):
            if raw.get(name):
                fields[name] = raw[name]
        dead = dead_letter_fields(job_id, agent, "invalid", reason, stream, entry_id, 0, raw, finished)
        alt = "" if explicit_id(raw) else f"{origin}:{job_id}"  # job_id names its partition, so the renamed id does too
        op = done_op(stream, entry_id, f"{origin}/{entry_id}", job_id, fields, dead, alt=alt, parent=raw.get("parent"), step=raw.get("step"),
                     keep_usage=True)  # a retry refused at claim: its earlier attempts' usage (the record's) still counts
        # a workflow's under its name (docs/workflows.md); any other agent's name, as sent, is not a label (unbounded)
        label = WORKFLOW_AGENT if agent == WORKFLOW_AGENT else UNKNOWN_AGENT_LABEL
        op.on_written = count_ending(label, "rejected", "invalid", job_id, reason, workflow=agent == WORKFLOW_AGENT)
        self.settler.submit(op)

    # -- upkeep and drain ----------------------------------------------------

    async def tick(self) -> None:
        """Log the summary when due; renew the slots of running capped jobs; then the partitions' upkeep (streams.upkeep)."""
        if self._tally.due(self._summary_every_s) and (line := self._tally.summary()):
            log.info("jobs: %s", line)
        if self.caps.caps is not None:
            await self.caps.renew([(self._keys_of[r.claimed.stream], r.claimed.request.tenant or "", r.claimed.job_id)
                                   for r in self._running.values() if self.caps.cap(r.claimed.request)])
        await self._upkeep.run()

    async def hand_back(self, slots: list[Slot]) -> int:
        """Put unfinished jobs back in their lanes at once, the interrupted attempt not counted, and let moves the
        drain stopped go to another worker's sweep; returns how many went back. A job another worker took over is
        left to it (settle.lua): handed back, its run there would be fenced off and a third run paid for."""
        wrote: list[bool] = []
        for slot in slots:
            if (run := self._running.pop(slot, None)) is not None:
                c = run.claimed
                fields = readded_fields(c.raw, c.job_id, c.submitted_at, c.entry_id)
                op = handback_op(c.stream, c.entry_id, c.source, c.job_id, fields, stored_usage(run.usage_before), worker=self.worker,
                                 cap=self.caps.op_info(c.request))
                op.on_written = wrote.append
                self.settler.submit(op)
        await self.settler.flush()
        if kept := wrote.count(False):
            log.info("%d jobs not handed back: another worker took them over, or they had ended", kept)
        stopped = self._forwarder.stopped(slots)
        return sum(wrote) + (await self.runtime.leases.let_go(stopped) if stopped else 0)

    async def taken_over(self, slots: list[Slot]) -> None:
        """Stop this worker's runs of jobs another worker took over once their outcome can no longer count
        (streams.superseded): the rest of the agent's calls would be paid for nothing."""
        runs = [(slot, self._running[slot]) for slot in slots if slot in self._running]
        whys = await runs_ended_elsewhere(self.redis, [(self._keys_of[r.claimed.stream].job(r.claimed.job_id), r.claimed.source) for _, r in runs])
        for (slot, run), why in zip(runs, whys, strict=True):
            if why and self._running.pop(slot, None) is not None:
                self.runtime.abandon(slot)
                log.warning("job=%s agent=%s attempt=%d stopped: another worker took it over after this one's lease ran out, "
                            "and %s; this run's result would be fenced off", run.claimed.job_id, run.claimed.request.agent, run.attempt, why)


def _being_cancelled() -> bool:
    """Whether the running task was cancelled (the drain, a run taken over), rather than handed a CancelledError
    by the code it awaits. Taken for a cancellation, an agent's own left its job held, renewed, with no result."""
    task = asyncio.current_task()
    return task is None or task.cancelling() > 0

