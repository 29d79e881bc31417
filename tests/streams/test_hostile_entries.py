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


async def test_an_entry_the_readers_fail_on_is_rejected_and_its_batch_runs(redis, keys: Keys, workers) -> None:
    # Given entries a reader could trip on, read in one batch with good ones: a superscript digit as submitted_at
    # (a digit to str.isdigit, not to int), and a long integer 400 levels deep (a recursive check's limit)
    await redis.xgroup_create(keys.lane("normal"), "workers", id="0", mkstream=True)
    await redis.xadd(keys.lane("normal"), {"agent": "echo", "data": "{}", "id": "odd-digit", "submitted_at": "\u00b2"})
    await redis.xadd(keys.lane("normal"), {"agent": "echo", "data": "{}", "id": "good-1"})
    deep = '{"a":' + "[" * 400 + "123456789012345678901234" + "]" * 400 + "}"
    await redis.xadd(keys.lane("normal"), {"agent": "echo", "data": deep, "id": "deep-wide"})
    await redis.xadd(keys.lane("normal"), {"agent": "echo", "data": "{}", "id": "good-2"})
    # When a worker reads them
    worker = workers.start()
    got = {r.id: r for r in await wait_results(redis, keys, 4, timeout=30)}
    # Then each bad one is rejected with its reason and a time, the good ones complete, and nothing stays pending
    assert got["odd-digit"].status == "rejected" and "submitted_at" in (got["odd-digit"].error or ""), got["odd-digit"]
    assert got["odd-digit"].submitted_at is not None and got["odd-digit"].submitted_at > 10**12
    assert got["deep-wide"].status == "rejected" and "beyond 64 bits" in (got["deep-wide"].error or ""), got["deep-wide"]
    assert got["good-1"].status == "completed" and got["good-2"].status == "completed"
    assert (await redis.xpending(keys.lane("normal"), "workers"))["pending"] == 0
    assert worker.alive(), worker.log_text()[-2000:]


async def test_a_raw_entry_cannot_take_the_name_an_idless_job_falls_back_to(redis, keys: Keys, workers) -> None:
    # Given an id-less job 5-0 on normal, and a raw entry naming 'high:5-0': the name an id-less entry 5-0 of the
    # high lane falls back to (its own, 5-0, being taken)
    workers.start()
    await redis.xadd(keys.lane("normal"), {"agent": "echo", "data": '{"n": 1}'}, id="5-0")
    await redis.xadd(keys.lane("normal"), {"agent": "echo", "data": '{"n": 2}', "id": "high:5-0"})
    await wait_results(redis, keys, 2, timeout=20)
    # When that id-less entry comes
    await redis.xadd(keys.lane("high"), {"agent": "echo", "data": '{"n": 3}'}, id="5-0")
    got = {r.id: r for r in await wait_results(redis, keys, 3, timeout=20)}
    # Then it runs under that name, and the raw entry was refused (a generated shape is reserved), under its own
    assert got["high:5-0"].status == "completed" and got["high:5-0"].result == {"echo": {"n": 3}}, got
    (refused,) = [r for r in got.values() if r.status == "rejected"]
    assert "reserved" in (refused.error or "") and refused.id not in ("5-0", "high:5-0"), refused


async def test_a_request_at_the_field_limit_is_retried(redis, keys: Keys, workers) -> None:
    # Given a request of 64 fields (the limit), an id among them, that fails its first attempt
    workers.start()
    fields = {"agent": "echo", "data": '{"fail_first": 1}', "id": "full"} | {f"x{i}": "1" for i in range(61)}
    assert len(fields) == 64
    await redis.xadd(keys.lane("normal"), fields)
    # Then its retry (the worker adds submitted_at and source_id) is not refused for its fields: it completes
    (result,) = await wait_results(redis, keys, 1, timeout=30)
    assert result.status == "completed" and result.attempts == 2, result


async def test_an_entry_id_past_year_9999_does_not_spoil_the_lanes_later_jobs(redis, keys: Keys, workers) -> None:
    # Given a raw entry with an ID past year 9999: the lane's later '*' IDs follow it
    workers.start()
    await redis.xadd(keys.lane("normal"), {"agent": "echo", "data": "{}", "id": "odd-id"}, id="300000000000000-0")
    await redis.xadd(keys.lane("normal"), {"agent": "echo", "data": '{"fail_first": 1}', "id": "ordinary"})
    got = {r.id: r for r in await wait_results(redis, keys, 2, timeout=30)}
    # Then both complete, the retried one too, with a submission time a reader can show (when it was read)
    assert got["odd-id"].status == "completed" and got["ordinary"].status == "completed", got
    assert got["ordinary"].attempts == 2 and got["ordinary"].submitted_at is not None and got["ordinary"].submitted_at <= now_ms()


async def test_a_raw_entry_with_a_steps_fields_runs_as_a_plain_job(redis, keys: Keys, workers) -> None:
    # Given a raw XADD that names a workflow, a step of it and inputs, under an id no workflow gave a step
    workers.start()
    await redis.xadd(keys.lane("normal"), {"agent": "echo", "data": '{"n": 1}', "id": "not-a-step", "parent": "wf-x",
                                            "step": "s1", "inputs": '{"earlier": {"paid": true}}'})
    # When a worker runs it
    (result,) = await wait_results(redis, keys, 1, timeout=30)
    # Then it ran as the plain job it is: no inputs handed to the agent, no parent or step on its result event (it ran
    # as a step of wf-x, and its event named one of wf-x's steps that never was)
    assert result.status == "completed" and result.result == {"echo": {"n": 1}}, result
    assert (result.parent, result.step) == (None, None)
    (entry,) = await redis.xrange(keys.results)
    assert "parent" not in entry[1] and "step" not in entry[1], entry
