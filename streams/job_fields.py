"""What a job's entries and dead letters carry, built from a claimed entry's raw fields."""

from __future__ import annotations

from collections.abc import Mapping

from streams.envelope import dumps
from streams.job_ids import is_valid_job_id, may_carry_id, takes_generated_id
from streams.raw import ENTRY_ID, SOURCE_FIELD


def explicit_id(raw: Mapping[str, str]) -> str | None:
    """The job id a raw entry names, when it may be one: in the id alphabet, and with '::' only on a workflow's
    step entry, and of a generated shape only on a worker's re-add. Anything else (a bad id, another job's step id, a
    raw entry's '<lane>:<entry ID>') leaves the job the entry's generated id."""
    job_id = raw.get("id")
    if (job_id is None or not is_valid_job_id(job_id) or not may_carry_id(job_id, raw.get("parent"), raw.get("step"))
            or takes_generated_id(raw)):
        return None
    return job_id


def readded_fields(raw: Mapping[str, str], job_id: str, submitted_at: int, entry_id: str) -> dict[str, str]:
    """The fields of a job going back to its lane: its id, when it was submitted, the entry its producer wrote."""
    fields = dict(raw)
    fields["id"] = job_id
    fields.setdefault("submitted_at", str(submitted_at))
    if not ENTRY_ID.fullmatch(fields.get(SOURCE_FIELD, "")):
        fields[SOURCE_FIELD] = entry_id
    return fields


def producer_entry(raw: Mapping[str, str], entry_id: str) -> str:
    """The lane entry the producer wrote: a re-added (retried, handed-back, replayed) entry names it, else it is this one."""
    first = raw.get(SOURCE_FIELD, "")
    return first if ENTRY_ID.fullmatch(first) else entry_id


def dead_letter_fields(job_id: str, agent: str, reason: str, error: str, stream: str, entry_id: str, attempts: int,
                       raw: Mapping[str, str], dead_at: int) -> dict[str, str]:
    """A job's dead letter (contract §3). source_id names the entry the producer wrote; a retried or handed-back
    job is a later entry (last_source_id)."""
    return {"id": job_id, "agent": agent, "reason": reason, "error": error, "source_stream": stream,
            "source_id": producer_entry(raw, entry_id), "last_source_id": entry_id,
            "attempts": str(attempts), "dead_at": str(dead_at), "request": dumps(dict(raw))}
