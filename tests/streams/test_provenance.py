"""What a dead letter and a record say about where and when a job started (issue 11 §5)."""

from __future__ import annotations

import json

from streams.dead import list_dead, purge, replay_all
from streams.keys import Keys
from streams.records import get_job
from tests.support import wait_results


async def test_dead_letter_names_the_entry_the_producer_wrote_after_retries(redis, keys: Keys, workers) -> None:
    # Given a request written by a raw XADD, failing all three of its attempts (two retries re-add it to the lane)
    workers.start("--agents", "echo")
    written = await redis.xadd(keys.lane("high"), {"agent": "echo", "data": json.dumps({"fail_first": 9}), "id": "raw-doomed", "max_attempts": "3"})
    (result,) = await wait_results(redis, keys, 1, timeout=20)
    assert (result.status, result.attempts) == ("failed", 3)
    # Then its dead letter names the entry the producer wrote, and keeps the last re-added one apart
    (letter,) = await list_dead(redis, keys)
    assert (letter.source_stream, letter.source_id) == (keys.lane("high"), written)
    assert letter.last_source_id is not None and letter.last_source_id > written


async def test_a_replayed_job_still_names_the_entry_the_producer_wrote(redis, keys: Keys, workers) -> None:
    # Given a raw request that failed for good, and its dead letter replayed once
    workers.start("--agents", "echo")
    written = await redis.xadd(keys.lane("normal"), {"agent": "echo", "data": json.dumps({"fail_first": 9}), "id": "twice-dead", "max_attempts": "1"})
    await wait_results(redis, keys, 1, timeout=20)
    (first,) = await list_dead(redis, keys)
    replayed, _ = await replay_all(redis, keys)
    assert replayed == ["twice-dead"]
    # When the replay fails again
    await wait_results(redis, keys, 2, timeout=20)
    (second,) = await list_dead(redis, keys)
    # Then the new dead letter still names the entry the producer wrote, and its own last entry apart
    assert first.source_id == written and second.source_id == written
    assert second.last_source_id is not None and second.last_source_id > written


async def test_an_invalid_first_entry_is_its_own_source(redis, keys: Keys, workers) -> None:
    workers.start("--agents", "echo")
    written = await redis.xadd(keys.lane("low"), {"agent": "echo", "data": "not json"})
    await wait_results(redis, keys, 1, timeout=20)
    (letter,) = await list_dead(redis, keys)
    assert (letter.reason, letter.source_id, letter.last_source_id) == ("invalid", written, written)


async def test_started_at_is_the_first_start(redis, keys: Keys, producer, workers) -> None:
    # Given a job that fails its first two attempts and completes on the third
    workers.start("--agents", "echo")
    await producer.publish("echo", {"fail_first": 2}, id="flaky", max_attempts=3)
    (result,) = await wait_results(redis, keys, 1, timeout=20)
    assert (result.status, result.attempts) == ("completed", 3)
    # Then the record and the result say when a worker first picked it up, and the record when the last attempt began
    record = await get_job(redis, keys, "flaky")
    assert record is not None and record.started_at is not None and record.attempt_started_at is not None
    assert result.started_at == record.started_at
    assert result.submitted_at is not None and result.submitted_at <= record.started_at < record.attempt_started_at


async def test_purge_and_replay_by_reason(redis, keys: Keys) -> None:
    for i, reason in enumerate(["invalid", "expired", "invalid", "exhausted"]):
        await redis.xadd(keys.dead, {"id": f"d{i}", "agent": "echo", "reason": reason, "error": "e", "source_stream": keys.lane("low"),
                                     "source_id": f"{i + 1}-0", "attempts": "1", "dead_at": "1",
                                     "request": json.dumps({"agent": "echo", "data": "{}"})})
    assert await purge(redis, keys, reason="invalid") == 2
    assert [d.id for d in await list_dead(redis, keys)] == ["d1", "d3"]
    replayed, skipped = await replay_all(redis, keys, reason="expired")
    assert (replayed, skipped) == (["d1"], [])
    assert [d.id for d in await list_dead(redis, keys)] == ["d3"]
    assert await redis.xlen(keys.lane("low")) == 1
    assert await purge(redis, keys) == 1
    assert await list_dead(redis, keys) == []
