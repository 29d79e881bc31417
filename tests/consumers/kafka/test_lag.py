"""``streamcrew_kafka_lag``: an unknown lag of the results group is left out, never exported as 0."""

from __future__ import annotations

from typing import Any

from prometheus_client import REGISTRY

from consumers.kafka_bridge.results_out import KAFKA_BRIDGE_GROUP


def _out() -> float | None:
    return REGISTRY.get_sample_value("streamcrew_kafka_lag", {"direction": "out"})


async def test_an_unknown_lag_of_the_results_group_is_not_exported_as_0(bridge: Any, redis: Any, keys: Any) -> None:
    # Given a results stream whose kafka-bridge group read and acknowledged its first entry, and an entry
    # not yet delivered that was then deleted: Redis cannot count the entries still waiting (lag nil)
    first = await redis.xadd(keys.results, {"id": "a"})
    second = await redis.xadd(keys.results, {"id": "b"})
    await redis.xadd(keys.results, {"id": "c"})
    await redis.xreadgroup(KAFKA_BRIDGE_GROUP, "reader", {keys.results: ">"}, count=1)
    await redis.xack(keys.results, KAFKA_BRIDGE_GROUP, first)
    await redis.xdel(keys.results, second)
    info = next(g for g in await redis.xinfo_groups(keys.results) if g["name"] == KAFKA_BRIDGE_GROUP)
    assert info.get("lag") is None and int(info["pending"]) == 0
    # When the bridge reads its lag
    await bridge.update_results_lag(redis)
    # Then the "out" series is left out (a 0 would say "nothing waits" while an entry waits)
    assert _out() is None
    # And once the group has read past the gap, the lag is known again and exported
    await redis.xreadgroup(KAFKA_BRIDGE_GROUP, "reader", {keys.results: ">"}, count=10)
    await bridge.update_results_lag(redis)
    out = _out()
    assert out is not None and out >= 1  # the entry delivered and not acknowledged (Redis 7.0 may count a phantom 1 of lag too)
