"""Job ids: the one alphabet every producer is held to, and the shapes the system reserves for itself."""

from __future__ import annotations

import re

from streams.keys import STEP_SEPARATOR
from collections.abc import Mapping

from streams.raw import ENTRY_ID, JOB_ID_MAX, SOURCE_FIELD

# One id alphabet everywhere (gateway, Python producer, CLI, raw XADD): ASCII that is safe in a URL path,
# a Redis key and a ``webhook-id`` header. '::' joins a workflow's id and a step's id (contract §9).
JOB_ID_PATTERN = rf"^[A-Za-z0-9_.:-]{{1,{JOB_ID_MAX}}}$"
JOB_ID_RULE = f"1-{JOB_ID_MAX} ASCII letters, digits, '_', '.', ':' or '-'"
_JOB_ID = re.compile(JOB_ID_PATTERN)  # fullmatch: Python's '$' also matches before a final newline
# The names the system gives id-less jobs: the entry ID, or '<lane>:<entry ID>' (publish.lua, start.lua).
_GENERATED_ID = re.compile(r"^(?:(?:high|normal|low):)?\d+-\d+(?::\d+)?$")  # optional :<partition>


def check_job_id(value: str) -> str:
    """``value`` if it is in the id alphabet, else a ValueError saying what is allowed."""
    if not _JOB_ID.fullmatch(value):
        raise ValueError(f"job id must be {JOB_ID_RULE}, got {value[:80]!r}")
    return value


def is_generated_id(value: str) -> bool:
    """Whether ``value`` has the shape of an id the system generates (producers may not choose one)."""
    return bool(_GENERATED_ID.fullmatch(value))


def reserved_id_problem(value: str) -> str | None:
    """Why a producer may not choose ``value`` as a job id, or None: the system's own id shapes are reserved,
    so an explicit id never lands on the record of an id-less job or of another workflow's step."""
    if is_generated_id(value):
        return "it has the shape of a generated id ('<digits>-<digits>', optionally after '<lane>:'): those are reserved for jobs sent without an id"
    if STEP_SEPARATOR in value:
        return STEP_ID_RESERVED
    return None


def takes_generated_id(raw: Mapping[str, str]) -> bool:
    """Whether a raw entry names a generated-shape id without being a worker's re-add (which names the entry its
    producer wrote in ``source_id``): taken, it could hold the name an id-less job falls back to (start.lua),
    and that job would end with no result."""
    job_id = raw.get("id")
    return job_id is not None and is_generated_id(job_id) and not ENTRY_ID.fullmatch(raw.get(SOURCE_FIELD, ""))


STEP_ID_RESERVED = f"'{STEP_SEPARATOR}' is reserved: it joins a workflow's id and a step's id"


def is_valid_job_id(value: str | None) -> bool:
    return value is not None and bool(_JOB_ID.fullmatch(value))


def is_step_entry(job_id: str | None, parent: str | None, step: str | None) -> bool:
    """Whether an entry is a workflow's step, as the workflow script writes one: id ``<parent>::<step>``."""
    return bool(parent) and bool(step) and job_id == f"{parent}{STEP_SEPARATOR}{step}"


def may_carry_id(job_id: str, parent: str | None, step: str | None) -> bool:
    """Whether an entry may name ``job_id``: one with '::' only when it is the workflow script's step entry
    (``<parent>::<step>``), so no producer names, reads or takes over another workflow's step."""
    return STEP_SEPARATOR not in job_id or is_step_entry(job_id, parent, step)


__all__ = ["JOB_ID_MAX", "JOB_ID_PATTERN", "JOB_ID_RULE", "STEP_ID_RESERVED", "check_job_id", "is_generated_id",
           "is_step_entry", "is_valid_job_id", "may_carry_id", "reserved_id_problem", "takes_generated_id"]
