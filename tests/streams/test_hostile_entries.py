"""Raw entries a hostile or careless writer can XADD: each ends rejected with its reason, and nothing else stops.

Bytes that are not UTF-8, a flood of fields, times out of range; and the fields a worker adds on a retry
never push a request over the size limit.
"""

import orjson

from streams.dead import list_dead
from streams.envelope import now_ms
from streams.keys import Keys
from tests.support import wait_results, wait_until


async def test_bytes_that_are_not_utf8_are_rejected_and_the_worker_goes_on(redis, keys: Keys, workers) -> None:
    # Given a worker
    worker = workers.start()
    # When an entry holds bytes that are not UTF-8, in a value and in a field name, with a good job after each
    bad = await redis.xadd(keys.lane("normal"), {b"agent": b"echo", b"data": b'{"x": "\xff\xfe"}', b"id": b"bad-utf8"})
    await redis.xadd(keys.lane("normal"), {"agent": "echo", "data": "{}", "id": "good-1"})
    await redis.xadd(keys.lane("normal"), {b"agent": b"echo", b"data": b"{}", b"id": b"bad-name", b"\xc3(": b"1"})
    await redis.xadd(keys.lane("normal"), {"agent": "echo", "data": "{}", "id": "good-2"})
    got = {r.id: r for r in await wait_results(redis, keys, 4, timeout=20)}
    # Then each bad one is rejected naming the field, the good ones complete, and the worker is alive
    assert got["bad-utf8"].status == "rejected" and "field 'data' is not valid UTF-8" in (got["bad-utf8"].error or "")
    assert got["bad-name"].status == "rejected" and "is not valid UTF-8" in (got["bad-name"].error or "")
    assert got["good-1"].status == "completed" and got["good-2"].status == "completed"
    assert worker.alive(), worker.log_text()[-2000:]
    # And the dead letter keeps the request, the undecodable bytes shown as U+FFFD
    dead = {d.id: d for d in await list_dead(redis, keys)}
    assert dead["bad-utf8"].source_id == bad
    assert orjson.loads(dead["bad-utf8"].request["data"]) == {"x": "\ufffd\ufffd"}
    assert (await redis.xpending(keys.lane("normal"), "workers"))["pending"] == 0


async def test_a_reclaimed_entry_that_is_not_utf8_does_not_stop_the_reclaim(redis, keys: Keys, workers) -> None:
    # Given two entries held by a consumer that died: one not UTF-8, one good
    await redis.xgroup_create(keys.lane("normal"), "workers", id="0", mkstream=True)
    await redis.xadd(keys.lane("normal"), {b"agent": b"echo", b"data": b'{"x": "\xff"}', b"id": b"orphan-bad"})
    await redis.xadd(keys.lane("normal"), {"agent": "echo", "data": "{}", "id": "orphan-good"})
    got = await redis.xreadgroup("workers", "ghost", {keys.lane("normal"): ">"}, count=2)
    assert len(got[0][1]) == 2
    # When a worker with a short lease starts
    worker = workers.start("--lease", "1")
    # Then its reclaim takes both: the bad one rejected, the good one run
    by_id = {r.id: r for r in await wait_results(redis, keys, 2, timeout=30)}
    assert by_id["orphan-bad"].status == "rejected"
    assert by_id["orphan-good"].status == "completed"
    # And the reclaim goes on: an entry of a second dead consumer is taken over too
    await redis.xadd(keys.lane("normal"), {"agent": "echo", "data": "{}", "id": "orphan-later"})
    await redis.xreadgroup("workers", "ghost-2", {keys.lane("normal"): ">"}, count=1)
    by_id = {r.id: r for r in await wait_results(redis, keys, 3, timeout=30)}
    assert by_id["orphan-later"].status == "completed"
    assert worker.alive(), worker.log_text()[-2000:]


async def test_a_request_with_too_many_fields_is_rejected(redis, keys: Keys, workers) -> None:
    # Given a worker; when an entry has 100 fields besides agent and data
    workers.start()
    await redis.xadd(keys.lane("normal"), {"agent": "echo", "data": '{"fail_first": 1}', "id": "wide",
                                            **{f"x{i}": "1" for i in range(100)}})
    (result,) = await wait_results(redis, keys, 1, timeout=20)
    # Then it is rejected at once with the reason (not lost on its retry, whose XADD could not take them all)
    assert result.status == "rejected" and "fields, over the limit of 64" in (result.error or ""), result


async def test_a_retry_never_pushes_a_request_over_the_size_limit(redis, keys: Keys, workers) -> None:
    # Given a 1,000-byte limit and a raw request a little under it that fails its first attempt
    workers.start(env={"STREAMCREW_MAX_REQUEST_BYTES": "1000"})
    fields = {"agent": "echo", "data": orjson.dumps({"fail_first": 1, "pad": ""}).decode()}
    pad = 990 - sum(len(k) + len(v) for k, v in fields.items())
    fields["data"] = orjson.dumps({"fail_first": 1, "pad": "p" * pad}).decode()
    await redis.xadd(keys.lane("normal"), fields)
    # When it is retried (the worker re-adds it with its id, submitted_at and source_id)
    (result,) = await wait_results(redis, keys, 1, timeout=20)
    # Then the retry runs and completes
    assert result.status == "completed" and result.attempts == 2, result


async def test_the_limit_counts_bytes_not_characters(redis, keys: Keys, workers) -> None:
    # Given a 1,000-byte limit; when a request of 600 characters but 1,200 bytes of UTF-8 comes
    workers.start(env={"STREAMCREW_MAX_REQUEST_BYTES": "1000"})
    await redis.xadd(keys.lane("normal"), {"agent": "echo", "data": orjson.dumps({"t": "é" * 580}).decode(), "id": "wide-chars"})
    (result,) = await wait_results(redis, keys, 1, timeout=20)
    # Then it is over the limit
    assert result.status == "rejected" and "over the 1000-byte limit" in (result.error or ""), result


async def test_times_out_of_range_are_rejected(redis, keys: Keys, workers) -> None:
    # Given a worker; when submitted_at is in microseconds and a deadline is past any representable time
    workers.start()
    await redis.xadd(keys.lane("normal"), {"agent": "echo", "data": "{}", "id": "micro", "submitted_at": str(now_ms() * 1000)})
    await redis.xadd(keys.lane("normal"), {"agent": "echo", "data": "{}", "id": "far", "deadline": "9" * 23})
    got = {r.id: r for r in await wait_results(redis, keys, 2, timeout=20)}
    # Then both are rejected naming the field, and the rejection keeps a readable submitted_at
    assert got["micro"].status == "rejected" and "submitted_at" in (got["micro"].error or "")
    assert got["far"].status == "rejected" and "deadline" in (got["far"].error or "")
    assert got["micro"].submitted_at is not None and got["micro"].submitted_at < 10**13


async def test_a_retry_that_starts_after_the_deadline_still_runs(redis, keys: Keys, workers) -> None:
    # Given a job that starts in time, fails its first attempt, and is retried after its deadline
    workers.start(env={"STREAMCREW_RETRY_BACKOFF_S": "4"})
    await redis.xadd(keys.lane("normal"), {"agent": "echo", "data": '{"fail_first": 1}', "id": "late-retry",
                                            "deadline": str(now_ms() + 1500)})
    (result,) = await wait_results(redis, keys, 1, timeout=30)
    # Then the deadline, which bounds the wait for a start, does not end the retry: it completes
    assert result.status == "completed" and result.attempts == 2, result
    assert result.started_at is not None


async def test_a_raw_job_is_its_tenants_while_it_runs(redis, keys: Keys, workers) -> None:
    # Given a raw XADD naming its tenant, webhook and trace
    workers.start()
    await redis.xadd(keys.lane("normal"), {"agent": "echo", "data": '{"sleep_s": 30}', "id": "raw-tenant", "tenant": "acme",
                                            "webhook": "https://hooks.example.com/in", "traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01"})

    async def running() -> bool:
        return await redis.hget(keys.job("raw-tenant"), "status") == "running"

    await wait_until(running, timeout=20, what="the raw job to run")
    # Then its record says whose it is from the start (a tenant-bound key finds it while it runs)
    record = await redis.hgetall(keys.job("raw-tenant"))
    assert record["tenant"] == "acme" and record["webhook"] == "https://hooks.example.com/in", record
    assert record["traceparent"].startswith("00-aaaa")


async def test_long_digit_runs_that_fit_or_sit_in_strings_are_fine(redis, keys: Keys, workers) -> None:
    # Given data whose long digit runs are a 64-bit integer, or text inside a string
    workers.start()
    data = '{"max": 18446744073709551615, "min": -9223372036854775808, "note": "ref 123456789012345678901234567890"}'
    await redis.xadd(keys.lane("normal"), {"agent": "echo", "data": data, "id": "long-digits"})
    (result,) = await wait_results(redis, keys, 1, timeout=20)
    # Then the job runs with its numbers exactly as sent
    assert result.status == "completed", result
    assert result.result["echo"] == orjson.loads(data)
