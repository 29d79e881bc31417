"""Webhook dead letters (``<prefix>:webhooks:dead``): list, replay, purge; what ``streamcrew webhooks dead`` calls.

Replay re-queues a dead letter on the due stream with a fresh attempt budget
and removes it, atomically; a running notifier delivers it (checked by the
SSRF guard again, signed with the current secrets).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import orjson
from pydantic import BaseModel, ConfigDict
from redis.asyncio import Redis

from consumers.notifier.store import Store
from streams.keys import Keys

REPLAY_PAGE = 500


class WebhookDeadLetter(BaseModel):
    """A delivery that exhausted its attempts, got 410 Gone, or was refused (contract §7)."""

    model_config = ConfigDict(extra="ignore")

    entry_id: str
    id: str
    url: str
    attempts: int = 0
    last_status: int | None = None
    error: str = ""
    dead_at: int = 0
    event: Any = None

    @classmethod
    def from_entry(cls, entry_id: str, raw: Mapping[str, str]) -> WebhookDeadLetter:
        values: dict[str, Any] = dict(raw)
        values["entry_id"] = entry_id
        values["last_status"] = raw.get("last_status") or None
        try:
            values["event"] = orjson.loads(raw.get("event", "null"))
        except orjson.JSONDecodeError:
            values["event"] = raw.get("event")
        return cls.model_validate(values)


async def list_webhook_dead(redis: Redis, keys: Keys, count: int = 100, *, start: str = "-") -> list[WebhookDeadLetter]:
    """Oldest first, at most ``count``, from entry ID ``start`` (XRANGE)."""
    entries = cast(list[tuple[str, dict[str, str]]], await redis.xrange(keys.webhooks_dead, min=start, max="+", count=count))
    return [WebhookDeadLetter.from_entry(eid, fields) for eid, fields in entries]


async def count_webhook_dead(redis: Redis, keys: Keys) -> int:
    return int(await redis.xlen(keys.webhooks_dead))


async def replay_webhook_dead(redis: Redis, keys: Keys, entry_ids: Sequence[str] | None = None) -> tuple[list[str], list[str]]:
    """Re-deliver the named dead letters, or all present now when ``entry_ids`` is None.

    Returns ``(replayed entry IDs, skipped with reasons)``.
    """
    store = Store(redis, keys)
    ids = list(entry_ids) if entry_ids is not None else await _all_ids(redis, keys)
    replayed: list[str] = []
    skipped: list[str] = []
    for entry_id in ids:
        if await store.replay(entry_id):
            replayed.append(entry_id)
        else:
            skipped.append(f"no webhook dead letter {entry_id} (already replayed or purged?)")
    return replayed, skipped


async def _all_ids(redis: Redis, keys: Keys) -> list[str]:
    """Every entry ID present now, not those that land while the replay runs."""
    ids: list[str] = []
    start = "-"
    while True:
        entries = cast(list[tuple[str, dict[str, str]]], await redis.xrange(keys.webhooks_dead, min=start, max="+", count=REPLAY_PAGE))
        if not entries:
            return ids
        ids += [eid for eid, _ in entries]
        start = "(" + entries[-1][0]


async def purge_webhook_dead(redis: Redis, keys: Keys) -> int:
    """Delete every webhook dead letter; returns how many there were."""
    async with redis.pipeline(transaction=True) as pipe:
        pipe.xlen(keys.webhooks_dead)
        pipe.delete(keys.webhooks_dead)
        n, _ = await pipe.execute()
    return int(n)
