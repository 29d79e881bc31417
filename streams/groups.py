"""Consumer groups, created idempotently at ID 0 by workers and producers alike."""

from __future__ import annotations

from collections.abc import Iterable

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from streams.keys import NOTIFIER_GROUP, WORKERS_GROUP, Keys


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
