"""Operator views of a partitioned prefix on one Redis (contract §10): gauges labelled by partition,
dead letters named and merged across partitions, lane-renamed id-less ids that keep their partition,
the stats window over every partition's results."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from streams import dead
from streams.errors import DeadLetterNotFound, StreamcrewError
from streams.gauges import StreamGauges
from streams.groups import ensure_groups, standard_groups
from streams.keys import Keys, partition_keys, partition_of
from streams.partition_stats import partitioned_queue_stats
from streams.producer import Producer
from streams.records import get_job
from tests.streams.test_gauges import _values
from tests.support import WorkerFactory, wait_until

N = 4


def _dead_fields(job_id: str, keys: Keys, reason: str = "exhausted") -> dict[str, str]:
    return {"id": job_id, "agent": "echo", "reason": reason, "error": "boom", "source_stream": keys.lane("normal"),
            "source_id": "1-0", "attempts": "1", "dead_at": "1700000000000", "request": '{"agent": "echo", "data": "{}"}'}


async def test_gauges_carry_a_partition_label(redis, redis_url: str, keys: Keys) -> None:
    # Given 4 partitions with their groups, 3 jobs in partition 1 (one delivered) and a dead letter in partition 3
    for k in partition_keys(keys, N):
        await ensure_groups(redis, standard_groups(k))
    one, three = keys.in_partition(1), keys.in_partition(3)
    for i in range(3):
        await redis.xadd(one.lane("high"), {"agent": "echo", "data": "{}", "id": f"g{i}"})
    await redis.xreadgroup("workers", "w1", {one.lane("high"): ">"}, count=1)
    await redis.xadd(three.dead, _dead_fields("d", three))
    registry = CollectorRegistry()
    registry.register(StreamGauges(redis_url, keys, partitions=N, cache_s=0))
    v = _values(registry)

    def length(stream: str, p: int) -> float:
        return v[("streamcrew_stream_length", (("partition", str(p)), ("stream", stream)))]

    # Then every stream is reported once per partition, with the figures of that partition
    assert [length("high", p) for p in range(N)] == [0, 3, 0, 0]
    assert [length("dead", p) for p in range(N)] == [0, 0, 0, 1]
    assert [length("webhooks_dead", p) for p in range(N)] == [0] * N
    high = lambda p: (("group", "workers"), ("partition", str(p)), ("stream", "high"))  # noqa: E731
    assert [v[("streamcrew_group_pending", high(p))] for p in range(N)] == [0, 1, 0, 0]
    assert [v[("streamcrew_group_consumers", high(p))] for p in range(N)] == [0, 1, 0, 0]
    assert ("streamcrew_consumer_idle_seconds", (("consumer", "w1"), *high(1))) in v
    assert v[("streamcrew_oldest_undelivered_age_seconds", high(1))] >= 0


async def test_dead_letters_are_named_by_partition_and_listed_merged(redis, keys: Keys) -> None:
    # Given dead letters in three partitions, two of them with the same entry ID
    parts = partition_keys(keys, N)
    for p, entry_id in ((2, "1700000000005-0"), (0, "1700000000005-0"), (3, "1700000000001-0"), (0, "1700000000009-0")):
        await redis.xadd(parts[p].dead, _dead_fields(f"j{p}-{entry_id[-3]}", parts[p], "expired" if p == 3 else "exhausted"), id=entry_id)
    # Then the listing is oldest first, each named <entry ID>:<partition>, and pages cover every one exactly once
    names = [d.entry_id for d in await dead.list_dead(redis, keys, partitions=N)]
    assert names == ["1700000000001-0:3", "1700000000005-0:0", "1700000000005-0:2", "1700000000009-0:0"]
    paged, after = [], None
    while page := await dead.list_dead(redis, keys, count=1, after=after, partitions=N):
        paged += [d.entry_id for d in page]
        after = page[-1].entry_id
    assert paged == names
    assert await dead.count_dead(redis, keys, partitions=N) == 4
    # And a bare entry ID found in one partition replays; found in two it is ambiguous; unknown is not found
    assert await dead.replay(redis, keys, "1700000000001-0", partitions=N) == ("j3-1", "1700000000001-0:3")  # named as listed
    with pytest.raises(StreamcrewError, match="1700000000005-0:0, 1700000000005-0:2"):
        await dead.replay(redis, keys, "1700000000005-0", partitions=N)
    with pytest.raises(DeadLetterNotFound):
        await dead.replay(redis, keys, "1700000000005-0:1", partitions=N)
    assert await dead.replay(redis, keys, "1700000000005-0:2", partitions=N) == ("j2-5", "1700000000005-0:2")
    assert await redis.xlen(parts[3].lane("normal")) == 1 and await redis.xlen(parts[2].lane("normal")) == 1
    # And purge empties every partition
    assert await dead.purge(redis, keys, partitions=N) == 2
    assert await dead.list_dead(redis, keys, partitions=N) == []


async def test_lane_renamed_id_less_jobs_keep_their_partition(redis, redis_url: str, prefix: str, tmp_path) -> None:
    # Given id-less raw XADDs with the same entry ID on two lanes of partition 2 (one pair malformed)
    keys = Keys(prefix)
    two = keys.in_partition(2)
    await redis.xadd(two.lane("high"), {"agent": "echo", "data": '{"n": 1}'}, id="1700000000000-0")
    await redis.xadd(two.lane("normal"), {"agent": "echo", "data": '{"n": 2}'}, id="1700000000000-0")
    await redis.xadd(two.lane("high"), {"agent": "echo", "data": "oops"}, id="1700000000001-0")
    await redis.xadd(two.lane("low"), {"agent": "echo", "data": "oops"}, id="1700000000001-0")
    workers = WorkerFactory(redis_url, prefix, tmp_path, env={"STREAMCREW_PARTITIONS": str(N)})
    try:
        workers.start()

        async def four() -> bool:
            return int(await redis.xlen(two.results)) >= 4

        await wait_until(four, timeout=30, what="4 results in partition 2")
    finally:
        workers.close()
    # Then the renamed ids name their lane and still their partition, and each is found by its id alone
    got = {f["id"]: f["status"] for _, f in await redis.xrange(two.results)}
    assert got == {"1700000000000-0:2": "completed", "normal:1700000000000-0:2": "completed",
                   "1700000000001-0:2": "rejected", "low:1700000000001-0:2": "rejected"}
    for job_id, status in got.items():
        record = await get_job(redis, keys, job_id, partitions=N)
        assert record is not None and record.status == status, job_id



async def test_stats_window_covers_the_latest_results_of_every_partition(redis, keys: Keys) -> None:
    # Given results in three partitions, interleaved in time (entry IDs), one of them failed
    parts = partition_keys(keys, N)
    for n, p in enumerate([0, 2, 3, 0, 2]):
        status = "failed" if n == 3 else "completed"
        await redis.xadd(parts[p].results, {"id": f"r{n}", "agent": "echo", "status": status, "attempts": "1",
                                            "submitted_at": "1700000000000", "started_at": "1700000000010",
                                            "finished_at": str(1700000000100 + n)}, id=f"1700000001{n:03d}-0")
    # When stats are asked over a window of 4 results
    figures = await partitioned_queue_stats(redis, keys, N, window=4)
    # Then the window holds the 4 newest of all partitions, and the sums cover all 5
    assert figures["window"]["results"] == 4 and figures["results"]["length"] == 5
    assert (figures["completed"], figures["failed"]) == (3, 1)
    assert figures["window"]["oldest_finished_at"] == 1700000000101


async def test_stats_list_each_consumer_once_over_the_partitions(redis, keys: Keys) -> None:
    # Given a consumer holding one entry of the normal lane in each of 4 partitions, and one that read nothing
    every = partition_keys(keys, N)
    for k in every:
        await ensure_groups(redis, standard_groups(k))
        await redis.xadd(k.lane("normal"), {"agent": "echo", "data": "{}"})
        await redis.xreadgroup("workers", "w-one", {k.lane("normal"): ">"}, count=1)
    for k in every[:2]:
        await redis.xgroup_createconsumer(k.lane("normal"), "workers", "w-two")
    # When stats sum the partitions
    lane = (await partitioned_queue_stats(redis, keys, N, window=None))["lanes"]["normal"]
    # Then each consumer is listed once, with what it holds in all of them (each partition's list stays under partitions)
    assert sorted((c["name"], c["pending"]) for c in lane["consumers"]) == [("w-one", 4), ("w-two", 0)]
    assert lane["pending"] == 4


async def test_id_less_requests_spread_over_partitions_even_one_producer_per_request(redis, keys: Keys) -> None:
    # Given a producer per request (a CLI `submit`, a producer made per web request), each publishing one id-less job
    ids = [(await Producer(redis, keys, partitions=N).publish("echo", {})).job_id for _ in range(40)]
    # Then they land in more than one partition (each producer's turns start at a random one; all 40 in one: 4 x 4**-40)
    used = {partition_of(job_id, N) for job_id in ids}
    assert len(used) > 1, f"40 one-request producers put every id-less job into partition {used}"
    # And one producer's id-less jobs still take turns over every partition
    producer = Producer(redis, keys, partitions=N)
    turns = [partition_of((await producer.publish("echo", {})).job_id, N) for _ in range(2 * N)]
    assert sorted(turns[:N]) == list(range(N)) and turns[N:] == turns[:N], turns
