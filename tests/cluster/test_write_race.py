"""On the cluster client too: a command whose connection another task closed meanwhile is retried.

The cluster client's failover handling closes node connections from its own task; redis-py 8.1 then
raised AttributeError from the transport (its issues #3546, #4287) instead of ConnectionError, which
the cluster's retry list names. See tests/streams/test_write_race.py for the single-node client.
"""

from __future__ import annotations

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from tests.streams.test_write_race import close_while_waiting


async def test_a_cluster_command_on_a_connection_closed_meanwhile_is_retried(cluster_redis: Redis, cluster_prefix: str) -> None:
    client: RedisCluster = cluster_redis  # type: ignore[assignment]
    key = f"{cluster_prefix}:write-race"
    node = client.get_node_from_key(key)
    conn = node.acquire_connection()
    assert type(conn).__name__.startswith("Guarded"), "nodes learnt from the slot map must get the guarded connection class"
    hits = close_while_waiting(conn, times=1)
    node.release(conn)
    assert await client.set(key, "1", ex=30)
    assert hits == [1], "the command did not go through the raced connection"
    assert await client.get(key) == "1"
