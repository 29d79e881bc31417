"""Exactly one result per job id, whatever the duplicates."""

from streams.keys import Keys
from tests.support import results, wait_results, wait_until


async def test_same_id_xadded_three_times_yields_one_result(redis, keys: Keys, workers) -> None:
    # Given the same id XADDed three times by hand, and a request without id
    for _ in range(3):
        await redis.xadd(keys.lane("normal"), {"agent": "echo", "data": '{"n": 1}', "id": "ORD-1-status"})
    anonymous = await redis.xadd(keys.lane("normal"), {"agent": "echo", "data": '{"n": 2}'})
    # When a worker starts after they were XADDed (the group did not exist yet)
    workers.start("--concurrency", "10")
    got = await wait_results(redis, keys, 2, timeout=20)
    # Then one result for the id, one for the anonymous request (its id is the entry ID)
    await redis.xadd(keys.lane("normal"), {"agent": "echo", "data": '{"n": 3}', "id": "sentinel"})
    got = await wait_results(redis, keys, 3, timeout=20)
    ids = sorted(r.id for r in got)
    assert ids == sorted(["ORD-1-status", anonymous, "sentinel"]), ids
    assert all(r.status == "completed" for r in got)
    # And the duplicates were acked, then trimmed away with the rest: nothing pending or queued
    assert (await redis.xpending(keys.lane("normal"), "workers"))["pending"] == 0

    async def trimmed() -> bool:
        return int(await redis.xlen(keys.lane("normal"))) == 0

    await wait_until(trimmed, timeout=10, what="the lane to be trimmed of acked entries")


async def test_publish_is_idempotent_even_after_the_job_finished(redis, keys: Keys, producer, workers) -> None:
    workers.start()
    first = await producer.publish("echo", {"x": 1}, id="same")
    await wait_results(redis, keys, 1, timeout=20)
    again = await producer.publish("echo", {"x": 2}, id="same")
    assert first.created and not again.created
    assert again.status == "completed"
    await producer.publish("echo", {}, id="sentinel")
    got = await wait_results(redis, keys, 2, timeout=20)
    assert sorted(r.id for r in got) == ["same", "sentinel"]


async def test_many_jobs_many_duplicates_one_result_each(redis, keys: Keys, producer, workers) -> None:
    from streams.envelope import JobRequest

    batch = [JobRequest(agent="echo", data={"i": i}, id=f"job-{i % 200}") for i in range(600)]
    published = await producer.publish_many(batch)
    assert sum(p.created for p in published) == 200
    workers.start("--concurrency", "50")
    workers.start("--concurrency", "50")
    got = await wait_results(redis, keys, 200, timeout=30)
    assert len(got) == 200
    assert len({r.id for r in got}) == 200
    assert len(await results(redis, keys)) == 200


async def test_record_knows_tenant_and_webhook_from_the_start(redis, keys: Keys, producer) -> None:
    from streams.records import get_job

    await producer.publish("echo", {}, id="t1", tenant="acme", webhook="https://example.com/h")
    record = await get_job(redis, keys, "t1")
    assert record is not None
    assert (record.status, record.tenant, record.webhook) == ("queued", "acme", "https://example.com/h")


async def test_id_less_jobs_published_to_different_lanes_never_share_an_id(redis, keys: Keys, producer) -> None:
    from streams.envelope import JobRequest

    ids = []
    for lane in ("high", "normal", "low", "high", "normal", "low"):
        ids += [p.job_id for p in await producer.publish_many([JobRequest(agent="echo", data={"i": i}) for i in range(50)], priority=lane)]
    assert len(set(ids)) == len(ids) == 300


async def test_id_less_raw_xadds_with_the_same_entry_id_on_two_lanes_both_get_a_result(redis, keys: Keys, workers) -> None:
    # Given two id-less requests with the same entry ID on two lanes (as two clients' XADD * can give), one malformed pair too
    await redis.xadd(keys.lane("high"), {"agent": "echo", "data": '{"n": 1}'}, id="1700000000000-0")
    await redis.xadd(keys.lane("normal"), {"agent": "echo", "data": '{"n": 2}'}, id="1700000000000-0")
    await redis.xadd(keys.lane("high"), {"agent": "echo", "data": "oops"}, id="1700000000001-0")
    await redis.xadd(keys.lane("low"), {"agent": "echo", "data": "oops"}, id="1700000000001-0")
    workers.start()
    got = await wait_results(redis, keys, 4, timeout=20)
    # Then each yields its own result: the first keeps the entry ID as job id, the other is named <lane>:<entry ID>
    assert sorted(r.id for r in got) == sorted(["1700000000000-0", "normal:1700000000000-0", "1700000000001-0", "low:1700000000001-0"])
    assert sorted(str(r.status) for r in got) == ["completed", "completed", "rejected", "rejected"]
