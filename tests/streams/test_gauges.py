"""Stream gauges read Redis at scrape time; idle consumers with nothing pending are forgotten."""

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from streams.gauges import StreamGauges
from streams.keys import Keys
from streams.runtime import GroupRuntime


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
