"""The partition count a prefix is laid out in, kept in Redis beside it (``<prefix>:partitions``).

Every process of a prefix must use the same ``STREAMCREW_PARTITIONS`` (contract §10): one left at the
default 1 beside workers of 6 would publish into lanes no worker reads, or read lanes no producer fills,
and nothing would say so. The first process to write records N; a process with another N is refused
with a clear error before it publishes, reads or settles anything.
"""

from __future__ import annotations

import asyncio
import logging

from redis.asyncio import Redis
from redis.asyncio.cluster import PipelineCommand, RedisCluster
from redis.exceptions import RedisError

from streams.errors import ConfigError
from streams.keys import LANES, Keys
from streams.outage import until_redis_answers
from streams.slow_slots import SLOW_CALL_S, SlotSlow, slot_of, slow_slots_of

log = logging.getLogger(__name__)
UNREAD_CHECK_S = 2.0  # how long a start asks for each unpartitioned lane's length (a hint: never waited out)


def layout_key(keys: Keys) -> str:
    return f"{keys.prefix}:partitions"


def _refusal(keys: Keys, recorded: str, partitions: int) -> ConfigError:
    return ConfigError(
        f"prefix {keys.prefix!r} is laid out in {recorded} partition(s) (Redis key {layout_key(keys)!r}), but this process "
        f"has STREAMCREW_PARTITIONS={partitions}: every process of a prefix must use the same N (docs/operations.md, "
        "'Partitions and Redis Cluster'; to change N, start a new prefix; once a prefix holds nothing, deleting that key frees it)")


async def claim_layout(redis: Redis, keys: Keys, partitions: int) -> None:
    """Record ``partitions`` for the prefix if nothing is recorded yet; refuse another N (a process that writes).

    On a Redis Cluster whose master of the key has not answered within ``SLOW_CALL_S`` (a paused VM), a replica of
    that master that holds the same N lets the process go on (the record is written once, when a prefix is first used,
    so a replica has had it since); the master's call runs on in the background. A replica never refuses, and one
    that has nothing, or another N, leaves the process waiting for the master, as before: only the master may claim.
    """
    if keys.partition is not None:
        raise ValueError("the layout belongs to the prefix's root keys, not to one partition's")
    key = layout_key(keys)
    slow = slow_slots_of(redis)
    if slow is None:
        await _claim(redis, keys, key, partitions)
        return
    try:
        await slow.call(slot_of(key), _claim(redis, keys, key, partitions))
    except SlotSlow as slowed:
        assert isinstance(redis, RedisCluster) and slowed.running is not None
        if await _recorded_on_a_replica(redis, key) == str(partitions):
            log.info("the layout %s=%d confirmed by a replica: its master has not answered for %.0f s", key, partitions, SLOW_CALL_S)
            return
        await slowed.running


async def _claim(redis: Redis, keys: Keys, key: str, partitions: int) -> None:
    if not await redis.set(key, str(partitions), nx=True):
        await check_layout(redis, keys, partitions)


async def _recorded_on_a_replica(redis: RedisCluster, key: str) -> str | None:
    """What a replica of ``key``'s master holds for it (read with READONLY), from the first that answers at once; None
    if none does or none holds it."""
    for replica in redis.nodes_manager.slots_cache.get(slot_of(key), [])[1:]:
        asked = [PipelineCommand(0, "READONLY"), PipelineCommand(1, "GET", key), PipelineCommand(2, "READWRITE")]
        try:
            await asyncio.wait_for(replica.execute_pipeline(asked), SLOW_CALL_S)
        except (TimeoutError, RedisError, OSError):
            continue
        value = asked[1].result
        if isinstance(value, (str, bytes)):  # not None (nothing held), an error, or no answer
            return value.decode() if isinstance(value, bytes) else value
    return None


async def hold_layout(what: str, redis: Redis, keys: Keys, partitions: int) -> None:
    """:func:`claim_layout` at a long-running process's start, waiting out a Redis that is down or full."""
    await until_redis_answers(what, lambda: claim_layout(redis, keys, partitions))


async def check_layout(redis: Redis, keys: Keys, partitions: int) -> None:
    """Refuse a recorded N other than ``partitions``; nothing recorded passes (a command that only reads)."""
    recorded = await redis.get(layout_key(keys))
    if recorded is None:
        return
    value = recorded.decode() if isinstance(recorded, bytes) else str(recorded)
    if value != str(partitions):
        raise _refusal(keys, value[:20], partitions)


async def warn_of_unread_lanes(redis: Redis, keys: Keys, partitions: int) -> dict[str, int]:
    """With partitions, the unpartitioned lanes (contract §1's ``<prefix>:requests:<lane>``) that hold entries, each
    logged as a warning: no worker reads them (a raw XADD to §1's key where §10's ``<prefix>:{<p>}:requests:<lane>``
    was meant), and nothing else would say so. Returns them; a Redis that does not answer is not waited for."""
    found: dict[str, int] = {}
    if partitions <= 1:
        return found
    for lane in LANES:
        try:
            entries = int(await asyncio.wait_for(redis.xlen(keys.lane(lane)), UNREAD_CHECK_S))
        except (RedisError, OSError, asyncio.TimeoutError):
            continue  # not a stream, or its node away: this is a hint, not a start's condition
        if entries:
            found[keys.lane(lane)] = entries
            log.warning("%s holds %d entries that no worker reads: with STREAMCREW_PARTITIONS=%d the lanes are "
                        "%s:{<p>}:requests:%s (p = 0..%d); XADD there, or move them", keys.lane(lane), entries, partitions,
                        keys.prefix, lane, partitions - 1)
    return found
