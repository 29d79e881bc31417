"""Worker-side Prometheus metrics (contract §8) and the producers' submission counter, on the process's default registry.

Children of labelled metrics are cached: ``labels()`` costs more than the
observation itself on a hot path of thousands of jobs a second.
"""

from __future__ import annotations

from functools import cache

from prometheus_client import Counter, Gauge, Histogram

from streams.workflow import WORKFLOW_AGENT

JOBS = Counter("streamcrew_jobs_total", "Jobs ended, by agent and terminal status", ["agent", "status"])
JOB_DURATION = Histogram(
    "streamcrew_job_duration_seconds", "Run time of one attempt", ["agent"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600),
)
QUEUE_WAIT = Histogram(
    "streamcrew_queue_wait_seconds", "Time from submission to the start of the first attempt", ["agent", "lane"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600),
)
IN_FLIGHT = Gauge("streamcrew_jobs_in_flight", "Attempts running now", ["agent"])
RETRIES = Counter("streamcrew_retries_total", "Attempts that failed and were scheduled again", ["agent"])
RECLAIMED = Counter("streamcrew_reclaimed_total", "Entries taken over from stalled consumers", ["lane"])
RESULTS_DROPPED = Counter(
    "streamcrew_results_dropped", "Result events cut from the results stream by its hard cap before every group acknowledged them",
)
DEAD_LETTERS = Counter("streamcrew_dead_letters_total", "Requests dead-lettered, by reason", ["reason"])
# Counted by every producer; exported by those that serve /metrics (the gateway).
SUBMITTED = Counter("streamcrew_jobs_submitted_total", "New jobs published to a lane by this process (repeated ids not counted)", ["lane"])


@cache
def jobs(agent: str, status: str) -> Counter:
    return JOBS.labels(agent=agent, status=status)


@cache
def duration(agent: str) -> Histogram:
    return JOB_DURATION.labels(agent=agent)


@cache
def queue_wait(agent: str, lane: str) -> Histogram:
    return QUEUE_WAIT.labels(agent=agent, lane=lane)


RUNNING: dict[str, int] = {}


@cache
def in_flight(agent: str) -> None:
    """Register the agent's in-flight gauge, read from ``RUNNING`` at scrape time (no lock per job)."""
    RUNNING.setdefault(agent, 0)
    IN_FLIGHT.labels(agent=agent).set_function(lambda: RUNNING[agent])


@cache
def retries(agent: str) -> Counter:
    return RETRIES.labels(agent=agent)


@cache
def reclaimed(lane: str) -> Counter:
    return RECLAIMED.labels(lane=lane)


@cache
def dead_letters(reason: str) -> Counter:
    return DEAD_LETTERS.labels(reason=reason)


@cache
def submitted(lane: str) -> Counter:
    return SUBMITTED.labels(lane=lane)


WORKFLOWS = Counter("streamcrew_workflows_total", "Workflows ended, by status", ["status"])
WORKFLOW_DURATION = Histogram(
    "streamcrew_workflow_duration_seconds", "Time from a workflow's start to its result (fan-in included)",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600),
)


def workflow_ended(status: str, duration_ms: int | None = None) -> None:
    """Count a workflow's end; rejected ones never started, so they have no duration."""
    WORKFLOWS.labels(status=status).inc()
    if duration_ms is not None:
        WORKFLOW_DURATION.observe(max(0, duration_ms) / 1000)


def workflow_fanned_in(status: str, duration_ms: int) -> None:
    """A workflow ended by the workflow scripts (fan-in, expiry, a replay with nothing left): its result event and
    its dead letter (workflow.lua: ``step_failed``, or ``expired``) count like any job's, not only in workflows_total."""
    jobs(WORKFLOW_AGENT, status).inc()
    if status != "completed":
        dead_letters("expired" if status == "expired" else "step_failed").inc()
    workflow_ended(status, duration_ms)
