"""A record's head (streams.records.get_job_head) reads each of its fields as the whole record (get_job) does."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from streams.envelope import JobResult
from streams.keys import Keys, keys_for_job
from streams.records import HEAD_FIELDS, get_job, get_job_head

WIDE = str(99999999999999999999999)  # past 64 bits: a raw writer's
RECORDS = {
    "ended": {"status": "completed", "agent": "echo", "attempts": "1", "tenant": "acme", "result": '{"ok": true}',
              "submitted_at": "1", "started_at": "2", "finished_at": "3", "usage": '{"tokens": 1}'},
    "words": {"status": "running", "agent": "echo", "attempts": "abc", "started_at": "soon", "steps_total": "many",
              "usage": "[1, 2]", "result": "not json"},
    "wide": {"status": "queued", "agent": "echo", "attempts": WIDE, "submitted_at": WIDE, "tenant": ""},
    "workflow": {"status": "running", "agent": "workflow", "attempts": "1", "steps_total": "3", "steps_done": "1"},
    "no-status": {"agent": "echo", "tenant": "acme"},
    "odd-status": {"status": "paused", "agent": "echo"},
}


@pytest.mark.parametrize("partitions", [1, 3])
async def test_a_head_reads_as_the_record(redis, keys: Keys, partitions: int) -> None:  # type: ignore[no-untyped-def]
    # Given records as the scripts write them, and as raw writers might (fields not of their type, no status)
    for job_id, fields in RECORDS.items():
        await redis.hset(keys_for_job(keys, partitions, job_id).job(job_id), mapping=fields)
    for job_id in [*RECORDS, "unknown"]:
        # When each is read whole and by its head
        record = await get_job(redis, keys, job_id, partitions=partitions)
        head = await get_job_head(redis, keys, job_id, partitions=partitions)
        # Then both are None, or the head's every field is the record's
        if record is None:
            assert head is None, job_id
            continue
        assert head is not None, job_id
        assert {name: getattr(head, name) for name in ("id", *HEAD_FIELDS)} == {
            name: getattr(record, name) for name in ("id", *HEAD_FIELDS)}, job_id
        assert head.terminal == record.terminal
    assert await get_job(redis, keys, "no-status", partitions=partitions) is None


async def test_a_records_parse_runs_in_the_callers_turn_given_its_size(redis, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    # Given an ended record with a result and usage, and one without either
    for job_id in ("ended", "words"):
        await redis.hset(keys.job(job_id), mapping=RECORDS[job_id])
    await redis.hset(keys.job("bare"), mapping={"status": "queued", "agent": "echo"})
    sizes: list[int] = []

    @asynccontextmanager
    async def turn(size: int) -> AsyncIterator[None]:
        sizes.append(size)
        yield

    # When each is read whole with a turn to parse in
    for job_id in ("ended", "words", "bare"):
        record = await get_job(redis, keys, job_id, turn=turn)
        assert record is not None and record.status == RECORDS.get(job_id, {"status": "queued"})["status"]
    # Then the turn was asked for once a record, with the characters of its result and usage (what its parse costs)
    assert sizes == [len('{"ok": true}') + len('{"tokens": 1}'), len("not json") + len("[1, 2]"), 0]


@pytest.mark.parametrize("job_id", ["ended", "words"])
async def test_a_records_result_event_is_the_one_a_full_dump_gave(redis, keys: Keys, job_id: str) -> None:  # type: ignore[no-untyped-def]
    # Given records whose result is parsed JSON, or text that is none
    await redis.hset(keys.job(job_id), mapping={**RECORDS[job_id], "status": "completed", "result": RECORDS[job_id]["result"]})
    record = await get_job(redis, keys, job_id)
    assert record is not None
    # When its result event is built (the result handed on, not dumped), then it is the one the full dump built
    dumped = JobResult.model_validate(record.model_dump(exclude={"lane", "attempt_started_at", "steps", "steps_total", "steps_done", "parked"}))
    assert record.as_result() == dumped
    assert record.as_result().to_json_dict() == dumped.to_json_dict()
    assert record.as_result().result is record.result  # not a copy
