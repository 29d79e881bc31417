"""`streamcrew stats` names the tenants with the most jobs parked over their cap (STREAMCREW_TENANT_MAX_RUNNING).

Before, it said only how many were parked in all; an operator seeing thousands parked could not tell whose. The
figures are read from each partition's ``tenants-parked`` hash, written here as tenant_cap.lua leaves it (the
parking itself runs in tests/consumers/test_tenant_cap.py)."""

from __future__ import annotations

import json

from redis.asyncio import Redis

from streams.keys import Keys, partition_keys
from streams.stats import PARKED_TENANTS_SHOWN
from streams.tenant_cap import parked_tenants_key
from tests.consumers.test_cli import cli

N = 3


async def test_stats_name_the_tenants_with_the_most_parked_summed_over_partitions(redis_url: str, prefix: str, redis: Redis,
                                                                                  keys: Keys) -> None:
    # Given 3 partitions with parked jobs: acme in every one, a tenant whose name looks like rich markup, and 30 small ones
    every = partition_keys(keys, N)
    await redis.hset(parked_tenants_key(every[0]), mapping={"acme": 40, "[red]x": 7, **{f"t{i:02}": 1 for i in range(30)}})
    await redis.hset(parked_tenants_key(every[1]), mapping={"acme": 2, "beta": 30})
    await redis.hset(parked_tenants_key(every[2]), mapping={"beta": 5})
    env = {"STREAMCREW_PARTITIONS": str(N), "COLUMNS": "200"}

    # When stats runs
    figures = json.loads(cli(redis_url, prefix, "stats", "--json", env=env).stdout)
    table = cli(redis_url, prefix, "stats", env=env).stdout

    # Then the total counts every parked job, and the most parked tenants come first, summed over the partitions
    assert figures["parked"] == 40 + 7 + 30 + 2 + 30 + 5
    shown = figures["parked_by_tenant"]
    assert list(shown.items())[:3] == [("acme", 42), ("beta", 35), ("[red]x", 7)], shown
    assert len(shown) == PARKED_TENANTS_SHOWN and all(n == 1 for t, n in shown.items() if t.startswith("t")), shown
    # And each partition's own figures name its own
    assert [p["parked_by_tenant"].get("beta", 0) for p in figures["partitions"]] == [0, 30, 5]
    # And the table shows the first 5 by name, as written (not as markup)
    assert all(f"tenant {t}" in table for t in ("acme", "beta", "[red]x", "t00", "t01")), table
    assert "tenant t02" not in table, table


def test_the_gateways_queue_stats_declare_parked_by_tenant() -> None:
    from consumers.gateway.models import QueueStats
    assert "parked_by_tenant" in QueueStats.model_json_schema()["required"]
