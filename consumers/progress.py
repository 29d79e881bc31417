"""``submit workflow --wait``: follow a workflow's record and print each step's status as it changes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from redis.asyncio import Redis

from streams.keys import Keys
from streams.records import JobRecord, get_job
from streams.sizes import visible

POLL_S = 0.2


async def follow_workflow(
    redis: Redis, keys: Keys, job_id: str, *, timeout_s: float, show: Callable[[str], None], partitions: int = 1,
) -> JobRecord | None:
    """Wait for the workflow to end, calling ``show`` with one line per step status change (found by its id alone)."""
    deadline = time.monotonic() + timeout_s
    seen: dict[str, str] = {}
    shown = ""  # the settled-steps count of the last line shown
    record = await get_job(redis, keys, job_id, partitions=partitions)
    while True:
        count = f"{record.steps_done or 0}/{record.steps_total or '?'}" if record else ""
        for step in (record.steps or []) if record else []:
            if seen.get(step["id"]) != step["status"]:
                seen[step["id"]] = step["status"]
                detail = f" ({step['error'][:120]})" if step.get("error") else ""
                show(visible(f"{count}  {step['id']:<24} {step['agent']:<12} {step['status']}{detail}"))  # a step's error is an agent's text
                shown = count
        if record is not None and record.terminal:
            if count != shown:  # the last steps were read settled before the count caught up with them
                show(f"{count}  {'(workflow)':<24} {'':<12} {record.status}")
            return record
        if time.monotonic() >= deadline:
            return record
        await asyncio.sleep(POLL_S)
        record = await get_job(redis, keys, job_id, partitions=partitions)
