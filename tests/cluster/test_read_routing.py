"""Stream reads on the cluster are placed by their keys locally: no COMMAND GETKEYS round trip per read.

redis-py 8.1 asks a node for the keys of every XREAD / XREADGROUP (a "movablekeys" command) before
sending it: it doubled a worker's round trips and put them all on one node (a master ~3x busier than
the others at concurrency 10). streams.cluster_client.StreamsCluster reads the keys after STREAMS.
"""

from __future__ import annotations

import redis as sync_redis
from redis.asyncio import Redis

from tests.cluster_support import LocalCluster


def getkeys_calls(cluster: LocalCluster) -> int:
    total = 0
    for port in cluster.masters():
        with sync_redis.Redis(host="127.0.0.1", port=port) as c:
            total += int(c.info("commandstats").get("cmdstat_command|getkeys", {}).get("calls", 0))
    return total


async def test_stream_reads_ask_no_node_for_their_keys(cluster: LocalCluster, cluster_redis: Redis, cluster_prefix: str) -> None:
    lanes = [f"{cluster_prefix}:{{3}}:requests:{lane}" for lane in ("high", "normal")]
    for lane in lanes:
        await cluster_redis.xgroup_create(lane, "workers", id="0", mkstream=True)
    await cluster_redis.xadd(lanes[1], {"agent": "echo"})
    before = getkeys_calls(cluster)
    # One lane, two lanes of one slot (the blocking read's shape), and a plain XREAD
    one = await cluster_redis.xreadgroup("workers", "c1", {lanes[0]: ">"}, count=5)
    both = await cluster_redis.xreadgroup("workers", "c1", {lane: ">" for lane in lanes}, count=5, block=10)
    seen = await cluster_redis.xread({lanes[1]: "0"}, count=5)
    await cluster_redis.xgroup_create(lanes[1], "streams", id="0")  # a group named like the keyword
    named = await cluster_redis.xreadgroup("streams", "streams", {lanes[1]: ">"}, count=5)
    assert len(named[0][1]) == 1
    assert not one  # the high lane is empty
    assert [stream for stream, _ in both] == [lanes[1]] and len(both[0][1]) == 1
    assert len(seen[0][1]) == 1
    assert getkeys_calls(cluster) == before, "a stream read asked a node for its keys"
