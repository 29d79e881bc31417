"""`streamcrew stats` for a lane that holds entries but whose `workers` group was deleted (XGROUP DESTROY).

Before, its lag read "unknown" (null), as for a lag Redis cannot count. The truth is known: a worker makes the group
again at ID 0 (streams.groups), so every entry is undelivered; stats says the group is missing, and in which
partitions, and counts the lane's length as its lag."""

from __future__ import annotations

import json

from redis.asyncio import Redis

from streams.groups import ensure_groups, standard_groups
from streams.keys import Keys, partition_keys
from streams.producer import Producer
from tests.consumers.test_cli import cli

N = 4


def _row(table: str, lane: str) -> str:
    return next(line for line in table.splitlines() if f" {lane} " in line)


async def test_a_lane_without_its_group_counts_every_entry_as_undelivered_and_says_so(redis_url: str, prefix: str, redis: Redis,
                                                                                    keys: Keys) -> None:
    # Given a lane of 3 entries whose group was deleted, beside lanes that keep theirs
    await ensure_groups(redis, standard_groups(keys))
    producer = Producer(redis, keys)
    for _ in range(3):
        await producer.publish("echo", {}, priority="high")
    await producer.publish("echo", {}, priority="low")
    await redis.xgroup_destroy(keys.lane("high"), "workers")

    # When stats runs
    figures = json.loads(cli(redis_url, prefix, "stats", "--json").stdout)
    table = cli(redis_url, prefix, "stats", env={"COLUMNS": "200"}).stdout

    # Then the lane's group is missing and every entry counts as waiting, not an unknown lag
    high = figures["lanes"]["high"]
    assert (high["lag"], high["pending"], high.get("group_missing")) == (3, 0, True), high
    assert "no group" in _row(table, "high") and "unknown" not in _row(table, "high"), table
    assert " 3 " in _row(table, "high").split("no group", 1)[1], table
    # And the lanes that keep their group say nothing of the kind
    assert figures["lanes"]["low"]["group_missing"] is False and "no group" not in _row(table, "low"), table


async def test_a_partition_without_its_group_is_named_and_its_entries_summed_into_the_lag(redis_url: str, prefix: str, redis: Redis,
                                                                                          keys: Keys, needs_redis7: None) -> None:
    # Given 4 partitions whose high lanes hold entries, and partition 2's group deleted
    every = partition_keys(keys, N)
    for k in every:
        await ensure_groups(redis, standard_groups(k))
    producer = Producer(redis, keys, partitions=N)
    for i in range(12):
        await producer.publish("echo", {"i": i}, priority="high")
    lengths = [int(await redis.xlen(k.lane("high"))) for k in every]
    assert lengths[2] > 0, lengths
    await redis.xgroup_destroy(every[2].lane("high"), "workers")

    # When stats runs over the partitions
    env = {"STREAMCREW_PARTITIONS": str(N)}
    figures = json.loads(cli(redis_url, prefix, "stats", "--json", env=env).stdout)
    table = cli(redis_url, prefix, "stats", env={"COLUMNS": "200", **env}).stdout

    # Then the summed lane names the partition that lacks the group, and its lag counts that partition's entries
    high = figures["lanes"]["high"]
    assert (high["lag"], high.get("group_missing"), high.get("group_missing_partitions")) == (sum(lengths), True, [2]), high
    assert [p["lanes"]["high"]["group_missing"] for p in figures["partitions"]] == [False, False, True, False]
    assert "no group in partition 2" in _row(table, "high") and "unknown" not in _row(table, "high"), table
    # And the lanes whose groups are all there (their merged last delivered ID unset, as always) say nothing of it
    assert (figures["lanes"]["low"]["group_missing"], figures["lanes"]["low"]["group_missing_partitions"]) == (False, [])
    assert "no group" not in _row(table, "low"), table
