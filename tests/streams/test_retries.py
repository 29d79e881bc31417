"""Retries with backoff, exhaustion to the dead stream, and replay of dead letters."""

import time

import pytest

from streams.dead import list_dead, replay
from streams.errors import JobIsLive
from streams.keys import Keys
from streams.records import get_job
from tests.support import wait_results


async def test_failing_twice_then_completing(redis, keys: Keys, producer, workers) -> None:
    workers.start()
    await producer.publish("echo", {"fail_first": 2}, id="flaky", max_attempts=3)
    (result,) = await wait_results(redis, keys, 1, timeout=20)
    assert result.status == "completed"
    assert result.attempts == 3
    assert await redis.xlen(keys.dead) == 0


async def test_exhausted_retries_end_failed_and_dead(redis, keys: Keys, producer, workers) -> None:
    workers.start()
    await producer.publish("echo", {"fail_first": 5}, id="hopeless", max_attempts=2)
    (result,) = await wait_results(redis, keys, 1, timeout=20)
    assert result.status == "failed"
    assert result.attempts == 2
    assert "attempt 2 fails on purpose" in (result.error or "")
    (letter,) = await list_dead(redis, keys)
    assert (letter.id, letter.reason, letter.attempts) == ("hopeless", "exhausted", 2)
    record = await get_job(redis, keys, "hopeless")
    assert record is not None and record.status == "failed"
    assert await redis.ttl(keys.job("hopeless")) > 0


async def test_replay_runs_again_with_a_fresh_budget(redis, keys: Keys, producer, workers) -> None:
    # Given a job that failed its 2 attempts (it fails while attempt <= 3)
    workers.start()
    await producer.publish("echo", {"fail_first": 3}, id="second-chance", max_attempts=2)
    await wait_results(redis, keys, 1, timeout=20)
    (letter,) = await list_dead(redis, keys)
    # When an operator replays it
    assert (await replay(redis, keys, letter.entry_id)).job_id == "second-chance"
    # Then it runs again with a fresh budget of 2, attempts counting on: 3 fails, 4 completes
    got = await wait_results(redis, keys, 2, timeout=20)
    assert [r.status for r in got] == ["failed", "completed"]
    assert got[1].attempts == 4
    assert await list_dead(redis, keys) == []


async def test_agent_timeout_is_a_failed_attempt(redis, keys: Keys, producer, workers) -> None:
    workers.start()
    await producer.publish("echo", {"sleep_s": 5}, id="slow", max_attempts=1, timeout_s=0.2)
    (result,) = await wait_results(redis, keys, 1, timeout=20)
    assert result.status == "failed"
    assert "timed out after 0.2s" in (result.error or "")


async def test_deadline_passed_before_start_expires(redis, keys: Keys, producer, workers) -> None:
    await producer.publish("echo", {}, id="late", deadline=1)
    workers.start()
    (result,) = await wait_results(redis, keys, 1, timeout=20)
    assert result.status == "expired"
    (letter,) = await list_dead(redis, keys)
    assert letter.reason == "expired"


async def test_replaying_an_expired_job_runs_it(redis, keys: Keys, producer, workers) -> None:
    # Given a job that expired: its deadline passed before a worker started it
    await producer.publish("echo", {"n": 1}, id="late-again", deadline=1)
    workers.start()
    (expired,) = await wait_results(redis, keys, 1, timeout=20)
    assert expired.status == "expired"
    (letter,) = await list_dead(redis, keys)
    # When an operator replays it
    assert (await replay(redis, keys, letter.entry_id)).job_id == "late-again"
    # Then it runs: the passed deadline is not carried into the replay (it would expire the job again at once)
    got = await wait_results(redis, keys, 2, timeout=20)
    assert [r.status for r in got] == ["expired", "completed"], [r.error for r in got]
    assert await list_dead(redis, keys) == []


async def test_replay_keeps_a_deadline_still_ahead(redis, keys: Keys, producer, workers) -> None:
    # Given a dead letter (rejected: unknown agent) whose deadline is still an hour away
    ahead = int(time.time() * 1000) + 3_600_000
    await producer.publish("no-such-agent", {}, id="keeps-deadline", deadline=ahead)
    workers.start()
    await wait_results(redis, keys, 1, timeout=20)
    workers.close()  # no worker: the replayed request stays in its lane to be read
    (letter,) = await list_dead(redis, keys)
    # When it is replayed, the request back in its lane still carries that deadline
    await replay(redis, keys, letter.entry_id)
    entries = await redis.xrange(keys.lane("normal"))
    assert entries and entries[-1][1].get("deadline") == str(ahead)


async def test_a_replay_never_overwrites_a_job_that_reused_the_id_since(redis, keys: Keys, producer, workers) -> None:
    # Given acme's job that died, its record expired, and the id submitted anew by globex and completed
    workers.start()
    await producer.publish("echo", {"fail_first": 5, "secret": "ACME"}, id="shared", max_attempts=1, tenant="acme")
    await wait_results(redis, keys, 1, timeout=20)
    (letter,) = await list_dead(redis, keys)
    await redis.delete(keys.job("shared"))  # its TTL ran out
    await producer.publish("echo", {"mine": "GLOBEX"}, id="shared", tenant="globex")
    await wait_results(redis, keys, 2, timeout=20)
    # When an operator replays acme's dead letter
    with pytest.raises(JobIsLive, match="submitted anew since it died"):
        await replay(redis, keys, letter.entry_id)
    # Then globex's job stays as it was: its result, its tenant; the letter stays for a purge
    record = await get_job(redis, keys, "shared")
    assert record is not None and (record.status, record.tenant, record.result) == ("completed", "globex", {"echo": {"mine": "GLOBEX"}})
    assert [d.entry_id for d in await list_dead(redis, keys)] == [letter.entry_id]


async def test_a_replay_onto_an_expired_record_belongs_to_its_tenant_from_the_start(redis, keys: Keys, producer, workers) -> None:
    # Given acme's dead job whose record expired
    worker = workers.start()
    await producer.publish("echo", {"fail_first": 1, "sleep_s": 0.5}, id="late", max_attempts=1, tenant="acme")
    await wait_results(redis, keys, 1, timeout=20)
    (letter,) = await list_dead(redis, keys)
    await redis.delete(keys.job("late"))
    worker.stop()  # so the replayed job waits, queued, where its record can be read
    # When it is replayed
    assert (await replay(redis, keys, letter.entry_id)).job_id == "late"
    # Then its record says whose it is before any worker took it (a tenant's key reads it; before: no tenant, 404)
    record = await get_job(redis, keys, "late")
    assert record is not None and (record.status, record.tenant) == ("queued", "acme")
