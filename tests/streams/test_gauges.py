"""Stream gauges read Redis at scrape time; idle consumers with nothing pending are forgotten."""

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from streams.gauges import StreamGauges
from streams.keys import Keys, partition_keys
from streams.runtime import GroupRuntime
from streams.tenant_cap import parked_tenants_key


def _values(registry: CollectorRegistry) -> dict:
    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


async def test_gauges_show_backlog_pending_and_dead(redis, redis_url: str, keys: Keys, producer, redis_version) -> None:
    # Given 5 normal requests of which 2 are delivered, and one dead letter
    for i in range(5):
        await producer.publish("echo", {"i": i})
    await redis.xreadgroup("workers", "w1", {keys.lane("normal"): ">"}, count=2)
    await redis.xadd(keys.dead, {"id": "x"})
    registry = CollectorRegistry()
    registry.register(StreamGauges(redis_url, keys, cache_s=0))
    v = _values(registry)
    lane = (("group", "workers"), ("partition", "0"), ("stream", "normal"))
    assert v[("streamcrew_stream_length", (("partition", "0"), ("stream", "normal")))] == 5
    assert v[("streamcrew_group_pending", lane)] == 2
    assert v[("streamcrew_group_consumers", lane)] == 1
    assert v[("streamcrew_stream_length", (("partition", "0"), ("stream", "dead")))] == 1
    assert v[("streamcrew_oldest_undelivered_age_seconds", lane)] >= 0
    assert ("streamcrew_consumer_idle_seconds", (("consumer", "w1"), *lane)) in v
    if redis_version >= (7, 0, 0):
        assert v[("streamcrew_group_lag", lane)] == 3


async def test_idle_consumers_without_pending_entries_are_forgotten(redis, keys: Keys, producer) -> None:
    # Given a consumer holding an entry and one that holds none
    await producer.publish("echo", {})
    await redis.xreadgroup("workers", "busy", {keys.lane("normal"): ">"}, count=1)
    await redis.xgroup_createconsumer(keys.lane("normal"), "workers", "gone")
    runtime = GroupRuntime(redis, streams=[keys.lane("normal")], group="workers", consumer="me", concurrency=1, lease_s=1, forget_idle_s=0.0)
    # When the cleanup runs
    removed = await runtime.leases.forget_idle_consumers()
    # Then only the one with nothing pending is removed
    assert removed == ["gone"]
    names = [c["name"] for c in await redis.xinfo_consumers(keys.lane("normal"), "workers")]
    assert names == ["busy"]


async def test_an_unknown_lag_is_left_out_and_the_waiting_entry_still_shows_its_age(redis, redis_url: str, keys: Keys) -> None:
    # Given a lane whose group read its first entry, and an entry not yet delivered that was then deleted:
    # Redis cannot count what still waits (XINFO GROUPS lag nil; always so on Redis 6)
    lane = keys.lane("normal")
    await redis.xgroup_create(lane, "workers", id="0", mkstream=True)
    ids = [await redis.xadd(lane, {"id": str(i)}, id=f"{1000 + i}-0") for i in range(3)]
    await redis.xreadgroup("workers", "w1", {lane: ">"}, count=1)
    await redis.xdel(lane, ids[1])
    assert next(g for g in await redis.xinfo_groups(lane) if g["name"] == "workers").get("lag") is None
    registry = CollectorRegistry()
    registry.register(StreamGauges(redis_url, keys, cache_s=0))
    v = _values(registry)
    labels = (("group", "workers"), ("partition", "0"), ("stream", "normal"))
    # Then no lag sample stands for it (a 0 would read "nothing waits")
    assert ("streamcrew_group_lag", labels) not in v
    # And the waiting entry's age, which the alerts fall back on, is there
    assert v[("streamcrew_oldest_undelivered_age_seconds", labels)] > 0


async def test_a_length_redis_cannot_read_is_left_out_and_other_partitions_still_show(redis, redis_url: str, keys: Keys) -> None:
    # Given two partitions where partition 0's normal lane and dead stream hold strings (XLEN answers WRONGTYPE)
    p0, p1 = keys.in_partition(0), keys.in_partition(1)
    await redis.set(p0.lane("normal"), "not a stream")
    await redis.set(p0.dead, "not a stream")
    for i in range(2):
        await redis.xadd(p1.lane("normal"), {"id": str(i)})
    registry = CollectorRegistry()
    registry.register(StreamGauges(redis_url, keys, partitions=2, cache_s=0))
    v = _values(registry)
    # Then no length sample stands for what could not be read (a 0 would read "empty")
    assert ("streamcrew_stream_length", (("partition", "0"), ("stream", "normal"))) not in v
    assert ("streamcrew_stream_length", (("partition", "0"), ("stream", "dead"))) not in v
    # And the streams that could be read still show, an empty one as 0
    assert v[("streamcrew_stream_length", (("partition", "1"), ("stream", "normal")))] == 2
    assert v[("streamcrew_stream_length", (("partition", "0"), ("stream", "high")))] == 0
    assert v[("streamcrew_stream_length", (("partition", "1"), ("stream", "dead")))] == 0


async def test_ages_and_consumers_redis_refuses_are_left_out_and_other_partitions_still_show(
    redis, acl_user, keys: Keys, needs_redis7
) -> None:  # type: ignore[no-untyped-def]
    # Given two partitions, each lane with one entry delivered to w1 and one waiting,
    p0, p1 = keys.in_partition(0), keys.in_partition(1)
    for k in (p0, p1):
        lane = k.lane("normal")
        await redis.xgroup_create(lane, "workers", id="0", mkstream=True)
        for i in range(2):
            await redis.xadd(lane, {"id": str(i)}, id=f"{1000 + i}-0")
        await redis.xreadgroup("workers", "w1", {lane: ">"}, count=1)
    # read by a user that may run XRANGE, XPENDING and XINFO CONSUMERS on partition 1's keys only (NOPERM on 0's)
    url = acl_user(f"{keys.prefix}:*", "-xrange", "-xpending", "-xinfo|consumers",
                   f"(~{p1.lane('normal')} +xrange +xpending +xinfo|consumers)")
    registry = CollectorRegistry()
    registry.register(StreamGauges(url, keys, partitions=2, cache_s=0))
    v = _values(registry)
    lane0 = (("group", "workers"), ("partition", "0"), ("stream", "normal"))
    lane1 = (("group", "workers"), ("partition", "1"), ("stream", "normal"))
    # Then what partition 0's refused reads would tell has no sample (a 0 would read "nothing waits", "no workers")
    for name in ("streamcrew_oldest_undelivered_age_seconds", "streamcrew_oldest_pending_age_seconds", "streamcrew_group_consumers"):
        assert (name, lane0) not in v, name
    # And what it could read still shows
    assert v[("streamcrew_group_pending", lane0)] == 1
    assert v[("streamcrew_stream_length", (("partition", "0"), ("stream", "normal")))] == 2
    # And partition 1 shows everything
    assert v[("streamcrew_oldest_undelivered_age_seconds", lane1)] > 0
    assert v[("streamcrew_oldest_pending_age_seconds", lane1)] > 0
    assert v[("streamcrew_group_consumers", lane1)] == 1


async def test_jobs_parked_over_their_tenants_cap_are_a_gauge_per_partition(redis, redis_url: str, keys: Keys) -> None:
    # Given 3 partitions, two with tenants' jobs parked (the hash tenant_cap.lua keeps: tenant -> how many)
    every = partition_keys(keys, 3)
    await redis.hset(parked_tenants_key(every[0]), mapping={"acme": 4, "beta": 1})
    await redis.hset(parked_tenants_key(every[2]), mapping={"acme": 2})
    registry = CollectorRegistry()
    registry.register(StreamGauges(redis_url, keys, partitions=3, cache_s=0))
    # When scraped, Then each partition says how many it holds parked, 0 where none (no tenant label)
    v = _values(registry)
    assert [v[("streamcrew_jobs_parked", (("partition", str(p)),))] for p in range(3)] == [5, 0, 2]


async def test_jobs_let_go_from_a_parked_list_show_as_their_lanes_resumed_stream(redis, redis_url: str, keys: Keys, producer) -> None:
    # Given the groups made (a producer makes them), and two jobs let go into the normal lane's resumed stream
    await producer.publish("echo", {})
    for i in range(2):
        await redis.xadd(keys.resumed("normal"), {"agent": "echo", "data": "{}", "id": f"r{i}"})
    registry = CollectorRegistry()
    registry.register(StreamGauges(redis_url, keys, cache_s=0))
    # When scraped, Then they are its group's lag, labelled resumed-normal (a stuck one alerts as a lane does)
    v = _values(registry)
    assert v[("streamcrew_stream_length", (("partition", "0"), ("stream", "resumed-normal")))] == 2
    assert v[("streamcrew_group_pending", (("group", "workers"), ("partition", "0"), ("stream", "resumed-normal")))] == 0


async def test_bytes_that_are_not_utf8_in_a_stream_or_a_consumer_name_leave_every_gauge_scraped(redis, redis_url: str, keys: Keys) -> None:
    # Given a raw XADD with a byte that is not UTF-8, waiting in a lane and in the results stream, and a consumer
    # created under such a name (XGROUP CREATECONSUMER takes any)
    lane = keys.lane("normal")
    for stream, group in ((lane, "workers"), (keys.results, "notifier")):
        await redis.xgroup_create(stream, group, id="0", mkstream=True)
        await redis.xadd(stream, {"agent": "echo", "data": "{}", "tenant": b"caf\xe9"})
    await redis.xreadgroup("workers", b"w\xff", {lane: ">"})
    registry = CollectorRegistry()
    registry.register(StreamGauges(redis_url, keys, cache_s=0))
    # When Prometheus scrapes, Then every gauge is there (the scrape failed: /metrics answered 500, every metric lost)
    v = _values(registry)
    labels = (("group", "workers"), ("partition", "0"), ("stream", "normal"))
    assert v[("streamcrew_group_pending", labels)] == 1 and v[("streamcrew_stream_length", (("partition", "0"), ("stream", "results")))] == 1, v
    idle = [dict(labels) for name, labels in v if name == "streamcrew_consumer_idle_seconds"]
    assert {"stream": "normal", "group": "workers", "consumer": "w\ufffd", "partition": "0"} in idle, idle
