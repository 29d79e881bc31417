"""Whether a job run that another worker took over is still worth finishing.

A worker stalled past its lease (a Redis stall, a paused process) finds at its next renewal jobs it is still
running taken over by another worker, which runs them again. Both runs go on: whichever ends first writes the
result, and the fence (settle.lua) turns the other away at its settle, after it paid for all its agent's calls.
A run is worth finishing only while its job is still open on the entry it was claimed from; once the record has
ended (the other run finished first) or moved to another entry (a retry, a replay), the rest would be thrown away.
"""

from __future__ import annotations

from collections.abc import Sequence

from redis.asyncio import Redis

from streams.envelope import TERMINAL


async def runs_ended_elsewhere(redis: Redis, runs: Sequence[tuple[str, str]]) -> list[str | None]:
    """For each ``(job key, source)`` run, why it can no longer count (:func:`ended_elsewhere`), read in one
    pipelined round: a stall can leave many runs taken over at once."""
    async with redis.pipeline(transaction=False) as pipe:
        for key, _ in runs:
            pipe.hmget(key, ["status", "source"])
        records = await pipe.execute()
    return [ended_elsewhere(record, source) for record, (_, source) in zip(records, runs, strict=True)]


def ended_elsewhere(record: Sequence[object], source: str) -> str | None:
    """Why a run claimed from ``source`` can no longer count, given its job record's ``[status, source]``; None
    while it still can. The fence of settle.lua, read ahead of the settle."""
    status, owner = record
    if status in TERMINAL:
        return f"the job has ended (status {status})"
    if owner is not None and owner != source:
        return "the job has moved on to another entry (retried or replayed)"
    return None
