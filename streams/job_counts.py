"""What a job's settlement counts once settle.lua wrote it: metrics, the dead-letter line, the attempt's report.

Counted on the write, not on the submit: settle.lua turns an op away when the job ended elsewhere (another
worker took it over), and what was turned away must not count.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from streams import metrics
from streams.sizes import short

log = logging.getLogger("streamcrew.jobs")


def count_retry(agent: str, report: Callable[[bool], None] | None) -> Callable[[bool], None]:
    """A retry counts once written: settle.lua turns it away when the job ended elsewhere (another worker took it over)."""
    def written(wrote: bool) -> None:
        if wrote:
            metrics.retries(agent).inc()
        if report is not None:
            report(wrote)
    return written


def count_ending(agent: str, status: str, dead_reason: str | None, job_id: str, error: str | None, *, workflow: bool = False,
                 report: Callable[[bool], None] | None = None) -> Callable[[bool], None]:
    """A job's ending (and its dead letter, its workflow's ending) counts once written: a fenced op only acked."""
    def written(wrote: bool) -> None:
        if wrote:
            metrics.jobs(agent, status).inc()
            if dead_reason:
                metrics.dead_letters(dead_reason).inc()
                log.info("job=%s agent=%s %s, dead-lettered (%s): %s", job_id, agent or "-", status, dead_reason, short(error))
            if workflow:
                metrics.workflow_ended(status)
        if report is not None:
            report(wrote)
    return written
