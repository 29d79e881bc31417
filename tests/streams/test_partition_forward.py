"""A raw XADD whose id belongs in another partition (crc32(id) mod N) is moved there by the worker (contract §10,
streams.forward): the job is then found by its id alone, and the same id sent again through a producer meets it
instead of running a second time. Before, it ran where it was written: 404 by id, and a second run.
Also: one partition's upkeep failing (its master away, a key gone wrong) holds up no other partition's retries."""

from __future__ import annotations

import asyncio
from pathlib import Path

from streams.envelope import JobRequest, entry_ms
from streams.forward import home_partition
from streams.keys import Keys, partition_keys, partition_of
from streams.producer import Producer
from streams.records import get_job
from tests.support import WorkerFactory, wait_until

N = 4


def misplaced_id(stem: str) -> tuple[str, int, int]:
    """An id, the partition it belongs in, and another one to XADD it into."""
    job_id = f"{stem}-raw"
    home = partition_of(job_id, N)
    return job_id, home, (home + 1) % N


async def results_of(redis, keys: Keys) -> list[dict[str, str]]:  # type: ignore[no-untyped-def]
    return [fields for k in partition_keys(keys, N) for _, fields in await redis.xrange(k.results)]


async def at_least(redis, keys: Keys, n: int) -> bool:  # type: ignore[no-untyped-def]
    return len(await results_of(redis, keys)) >= n


async def repeat_then_sentinel(redis, keys: Keys, job_id: str, into: int) -> None:  # type: ignore[no-untyped-def]
    """XADD ``job_id`` (valid) into partition ``into``'s normal lane, then an id-less sentinel behind it; wait until
    the sentinel's result is in (one more result than before) and the lane has nothing pending."""
    lane = partition_keys(keys, N)[into].lane("normal")
    before = len(await results_of(redis, keys))
    await redis.xadd(lane, {"agent": "echo", "data": "{}", "id": job_id})
    await redis.xadd(lane, {"agent": "echo", "data": "{}"})

    async def sentinel_in_and_acked() -> bool:
        return len(await results_of(redis, keys)) > before and (await redis.xpending(lane, "workers"))["pending"] == 0

    await wait_until(sentinel_in_and_acked, timeout=30, what=f"the sentinel behind the repeat of {job_id}, and both acked")


async def test_a_raw_xadd_into_another_partition_runs_once_in_its_own_and_is_found_by_id(
        redis, redis_url: str, prefix: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # Given a raw XADD of an id into a partition that is not the id's own, with a first attempt that fails
    keys = Keys(prefix)
    parts = partition_keys(keys, N)
    job_id, home, wrong = misplaced_id("moved")
    entry = await redis.xadd(parts[wrong].lane("high"), {"agent": "echo", "data": '{"fail_first": 1}', "id": job_id, "tenant": "acme"})
    workers = WorkerFactory(redis_url, prefix, tmp_path, env={"STREAMCREW_PARTITIONS": str(N)})
    try:
        # When a worker of every partition runs
        worker = workers.start()

        async def one_result() -> bool:
            return len(await results_of(redis, keys)) >= 1

        await wait_until(one_result, timeout=30, what=f"the result of {job_id}")
        # Then the job ran, was retried and completed in its own partition, from the lane it was XADDed to
        (result,) = await results_of(redis, keys)
        assert (result["id"], result["status"], result["attempts"], result["tenant"]) == (job_id, "completed", "2", "acme")
        assert await redis.xlen(parts[home].results) == 1 and await redis.xlen(parts[wrong].results) == 0
        assert result["submitted_at"] == str(entry_ms(entry)), "the move lost when the job was first submitted"
        # And it is found by its id alone; nothing of it stays in the partition it was written to
        record = await get_job(redis, keys, job_id, partitions=N)
        assert record is not None and record.status == "completed"
        assert not await redis.exists(parts[wrong].job(job_id))
        assert (await redis.xpending(parts[wrong].lane("high"), "workers"))["pending"] == 0
        assert "moved there" in worker.log_text()

        # When the same id comes again through a producer, then a sentinel job after it
        again = await Producer(redis, keys, partitions=N).publish_many([JobRequest(agent="echo", data={}, id=job_id)])
        await Producer(redis, keys, partitions=N).publish_many([JobRequest(agent="echo", data={}, id="sentinel")])

        async def sentinel_done() -> bool:
            return any(r["id"] == "sentinel" for r in await results_of(redis, keys))

        await wait_until(sentinel_done, timeout=30, what="the sentinel's result")
        # Then it met the job: not created, no second run, one result event for the id
        assert not again[0].created and again[0].status == "completed"
        assert [r["id"] for r in await results_of(redis, keys)].count(job_id) == 1
    finally:
        workers.close()


async def test_a_raw_xadd_repeating_a_finished_job_in_another_partition_yields_nothing_more(
        redis, redis_url: str, prefix: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # Given a job that completed in its own partition, sent by a producer
    keys = Keys(prefix)
    parts = partition_keys(keys, N)
    job_id, home, wrong = misplaced_id("repeat")
    workers = WorkerFactory(redis_url, prefix, tmp_path, env={"STREAMCREW_PARTITIONS": str(N)})
    try:
        workers.start()
        await Producer(redis, keys, partitions=N).publish_many([JobRequest(agent="echo", data={}, id=job_id)])
        await wait_until(lambda: at_least(redis, keys, 1), timeout=30, what=f"the result of {job_id}")
        # When the same id is XADDed raw into another partition's lane, then a sentinel after it into that lane
        await repeat_then_sentinel(redis, keys, job_id, wrong)
        # Then the raw copy was acknowledged without a second run or record
        assert [r["id"] for r in await results_of(redis, keys)].count(job_id) == 1
        assert not await redis.exists(parts[wrong].job(job_id))
    finally:
        workers.close()


def test_only_a_producers_kind_of_request_in_a_wrong_partition_moves() -> None:
    keys = Keys("p")
    job_id, home, wrong = misplaced_id("unit")
    request = JobRequest(agent="echo", data={}, id=job_id)
    raw = {"agent": "echo", "data": "{}", "id": job_id}
    assert home_partition(keys.in_partition(wrong), N, raw, request) == home
    assert home_partition(keys.in_partition(home), N, raw, request) is None  # in its own partition
    assert home_partition(keys, 1, raw, request) is None  # unpartitioned
    assert home_partition(keys.in_partition(wrong), N, {**raw, "source_id": "1-0"}, request) is None  # a retry, hand-back or replay
    idless = JobRequest(agent="echo", data={})
    assert home_partition(keys.in_partition(wrong), N, {"agent": "echo", "data": "{}"}, idless) is None
    generated = f"1700000000000-0:{home}"  # a generated id's shape names its partition: producers refuse it, it runs in place
    assert home_partition(keys.in_partition(wrong), N, {**raw, "id": generated}, JobRequest.model_construct(agent="echo", data={}, id=generated)) is None


async def test_a_move_that_fails_unexpectedly_is_taken_up_again_not_held_forever(
        redis, redis_url: str, prefix: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # Given a misplaced raw XADD, read by a worker of its partition only, whose move fails with an error it does not
    # expect (a refusal that is no outage: the id's own partition holds a key of another type where a stream goes)
    keys = Keys(prefix)
    parts = partition_keys(keys, N)
    job_id, home, wrong = misplaced_id("unexpected")
    await redis.set(parts[home].results, "not a stream")
    await redis.xadd(parts[wrong].lane("normal"), {"agent": "echo", "data": "{}", "id": job_id})
    workers = WorkerFactory(redis_url, prefix, tmp_path, env={"STREAMCREW_PARTITIONS": str(N)})
    try:
        worker = workers.start("--partitions", str(wrong), "--lease", "1")

        async def delivered() -> bool:
            return (await redis.xpending(parts[wrong].lane("normal"), "workers"))["pending"] == 1

        await wait_until(delivered, timeout=20, what="the entry to be delivered")
        await asyncio.sleep(1.5)  # the move is tried at once, and refused (past the lease too)
        # When the cause is gone
        await redis.delete(parts[home].results)

        # Then the entry is taken up again after its lease and moved (before: its slot was held and its lease renewed
        # for good, by a task that had ended: pending forever, never moved, a slot of the worker lost)
        async def moved() -> bool:
            return (await redis.xpending(parts[wrong].lane("normal"), "workers"))["pending"] == 0

        await wait_until(moved, timeout=20, what="the entry to be moved and acknowledged")
        record = await get_job(redis, keys, job_id, partitions=N)
        assert record is not None and record.status == "queued"
        assert await redis.xlen(parts[home].lane("normal")) == 1
        assert "WRONGTYPE" in worker.log_text(), "the failed move was not logged"
    finally:
        workers.close()


async def test_an_id_whose_record_is_in_the_partition_written_to_stays_with_it(
        redis, redis_url: str, prefix: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # Given a raw XADD of an id into another partition than its own, rejected there at claim (its data is no JSON):
    # its one result event is out, and its record lives in the partition it was written to
    keys = Keys(prefix)
    parts = partition_keys(keys, N)
    job_id, home, wrong = misplaced_id("rejected")
    workers = WorkerFactory(redis_url, prefix, tmp_path, env={"STREAMCREW_PARTITIONS": str(N)})
    try:
        workers.start()
        await redis.xadd(parts[wrong].lane("normal"), {"agent": "echo", "data": "not json", "id": job_id})
        await wait_until(lambda: at_least(redis, keys, 1), timeout=30, what=f"the rejection of {job_id}")
        # When the same id is XADDed again, valid, into that partition, then a sentinel after it into that lane
        await repeat_then_sentinel(redis, keys, job_id, wrong)
        # Then it met its record there: no second run, one result event for the id (before: moved past its record,
        # it ran in its own partition and yielded a second one, 'completed' after 'rejected')
        assert [(r["id"], r["status"]) for r in await results_of(redis, keys) if r["id"] == job_id] == [(job_id, "rejected")]
        assert not await redis.exists(parts[home].job(job_id))
    finally:
        workers.close()


async def test_one_partitions_failing_upkeep_holds_up_no_other_partitions_retries(
        redis, redis_url: str, prefix: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # Given partition 0's delayed set broken (a key of the wrong type: every promotion there fails), and a job of
    # another partition whose first attempt fails
    keys = Keys(prefix)
    parts = partition_keys(keys, N)
    await redis.set(parts[0].delayed, "not a sorted set")
    job_id = next(j for j in (f"retried-{i}" for i in range(100)) if partition_of(j, N) != 0)
    workers = WorkerFactory(redis_url, prefix, tmp_path, env={"STREAMCREW_PARTITIONS": str(N)})
    try:
        workers.start()
        await Producer(redis, keys, partitions=N).publish_many([JobRequest(agent="echo", data={"fail_first": 1}, id=job_id)])

        # When its retry falls due
        async def completed() -> bool:
            return any(r["id"] == job_id and r["status"] == "completed" for r in await results_of(redis, keys))

        # Then it is promoted and completes (before: partition 0's failure ended each round of upkeep first)
        await wait_until(completed, timeout=30, what=f"{job_id}'s retry to run while partition 0's upkeep fails")
    finally:
        workers.close()
