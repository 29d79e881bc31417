"""Consumer groups, created idempotently at ID 0 by workers and producers alike."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from streams.keys import NOTIFIER_GROUP, WORKERS_GROUP, Keys
from streams.outage import until_redis_answers
from streams.slow_slots import SlotSlow, SlowSlots, slot_of, slow_slots_of


def is_nogroup(exc: BaseException) -> bool:
    """Whether Redis refused a call because the consumer group (or its stream) is gone: a Redis restarted empty."""
    return isinstance(exc, ResponseError) and str(exc).startswith("NOGROUP")


async def ensure_group(redis: Redis, stream: str, group: str) -> None:
    """``XGROUP CREATE stream group 0 MKSTREAM`` unless the group exists.

    ID 0, not ``$``: entries XADDed before any consumer ever ran are delivered.
    See https://redis.io/docs/latest/commands/xgroup-create/
    """
    try:
        await redis.xgroup_create(stream, group, id="0", mkstream=True)
    except ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


async def ensure_groups(redis: Redis, pairs: Iterable[tuple[str, str]]) -> None:
    for stream, group in pairs:
        await ensure_group(redis, stream, group)


def standard_groups(keys: Keys) -> list[tuple[str, str]]:
    """Every lane and resumed stream with ``workers``, and the results stream with ``notifier``."""
    return [(stream, WORKERS_GROUP) for stream in keys.work_streams] + [(keys.results, NOTIFIER_GROUP)]


async def hold_partition_groups(what: str, redis: Redis, partitions: Sequence[Keys]) -> None:
    """Each partition's :func:`standard_groups` at a long-running process's start, waiting out a Redis that is down or
    full. On Redis Cluster with several partitions, a partition whose master does not answer within the slow-call time
    (it hangs: streams.slow_slots) is left to be done in the background, so a process started during the hang serves
    the other masters' partitions at once; a group still missing when that master answers is made by the read that
    meets NOGROUP."""
    slow = slow_slots_of(redis) if len(partitions) > 1 else None
    for keys in partitions:
        await until_redis_answers(what, functools.partial(_partition_groups, redis, keys, slow))


async def _partition_groups(redis: Redis, keys: Keys, slow: SlowSlots | None) -> None:
    pairs = standard_groups(keys)
    if slow is None:
        await ensure_groups(redis, pairs)
        return
    try:
        await slow.unless_slow(slot_of(keys.slot_guard), functools.partial(ensure_groups, redis, pairs))
    except SlotSlow:  # left running: its master hangs
        pass
