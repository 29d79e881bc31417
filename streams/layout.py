"""The partition count a prefix is laid out in, kept in Redis beside it (``<prefix>:partitions``).

Every process of a prefix must use the same ``STREAMCREW_PARTITIONS`` (contract §10): one left at the
default 1 beside workers of 6 would publish into lanes no worker reads, or read lanes no producer fills,
and nothing would say so. The first process to write records N; a process with another N is refused
with a clear error before it publishes, reads or settles anything.
"""

from __future__ import annotations

from redis.asyncio import Redis

from streams.errors import ConfigError
from streams.keys import Keys
from streams.outage import until_redis_answers


def layout_key(keys: Keys) -> str:
    return f"{keys.prefix}:partitions"


def _refusal(keys: Keys, recorded: str, partitions: int) -> ConfigError:
    return ConfigError(
        f"prefix {keys.prefix!r} is laid out in {recorded} partition(s) (Redis key {layout_key(keys)!r}), but this process "
        f"has STREAMCREW_PARTITIONS={partitions}: every process of a prefix must use the same N (docs/operations.md, "
        "'Partitions and Redis Cluster'; to change N, start a new prefix; once a prefix holds nothing, deleting that key frees it)")


async def claim_layout(redis: Redis, keys: Keys, partitions: int) -> None:
    """Record ``partitions`` for the prefix if nothing is recorded yet; refuse another N (a process that writes)."""
    if keys.partition is not None:
        raise ValueError("the layout belongs to the prefix's root keys, not to one partition's")
    key = layout_key(keys)
    if not await redis.set(key, str(partitions), nx=True):
        await check_layout(redis, keys, partitions)


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
