"""Webhook dead letters (``<prefix>:webhooks:dead``): list, replay, purge; what ``streamcrew webhooks dead`` calls.

Replay re-queues a dead letter on the due stream with a fresh attempt budget
and removes it, atomically; a running notifier delivers it (checked by the
SSRF guard again, signed with the current secrets).

With partitions (contract §10) each partition has its own ``webhooks:dead``; the
names, merging, paging and locating are those of job dead letters
(:mod:`streams.dead`): ``<entry ID>:<p>``, oldest first across partitions, a
bare entry ID when only one partition has it. A replayed letter goes back to
its own partition's due stream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError
from redis.asyncio import Redis

from consumers.notifier.store import Store
from streams import dead
from streams.envelope import entry_ms
from streams.errors import DeadLetterNotFound, StreamcrewError
from streams.keys import Keys, partition_keys
from streams.raw import repaired_fields


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
        raw = repaired_fields(raw)  # a hand-made letter's bytes that are not UTF-8: U+FFFD, so any JSON can show it
        values: dict[str, Any] = dict(raw)
        values["entry_id"] = entry_id
        values["last_status"] = raw.get("last_status") or None
        try:
            values["event"] = orjson.loads(raw.get("event", "null"))
        except orjson.JSONDecodeError:
            values["event"] = raw.get("event")
        try:
            return cls.model_validate(values)
        except ValidationError as exc:  # not written by the notifier (a hand-made XADD): listed as such, never failing the list
            return cls(entry_id=entry_id, id=str(raw.get("id", "")), url="", error=f"not a webhook dead letter the notifier wrote: "
                       f"{'; '.join(str(e['loc'][0]) + ': ' + e['msg'] for e in exc.errors())}", dead_at=entry_ms(entry_id))


def _webhooks_dead(keys: Keys) -> str:
    return keys.webhooks_dead


async def list_webhook_dead(
    redis: Redis, keys: Keys, count: int = 100, *, after: str | None = None, partitions: int = 1,
) -> list[WebhookDeadLetter]:
    """Oldest first (of every partition, merged), at most ``count``, those after the one named ``after``."""
    entries = await dead.merged_entries(redis, keys, _webhooks_dead, count=count, after=after, partitions=partitions)
    return [WebhookDeadLetter.from_entry(name, fields) for name, fields in entries]


async def count_webhook_dead(redis: Redis, keys: Keys, *, partitions: int = 1) -> int:
    return await dead.count_dead(redis, keys, partitions=partitions, stream=_webhooks_dead)


async def replay_one_webhook_dead(redis: Redis, keys: Keys, entry: str, *, partitions: int = 1) -> str:
    """Re-deliver the webhook dead letter named ``entry`` (via its partition's due stream); returns its name.

    Raises :class:`DeadLetterNotFound`, or :class:`StreamcrewError` for a bare entry ID found in several partitions.
    """
    where, entry_id = await dead.locate(redis, keys, entry, partitions, stream=_webhooks_dead, what="webhook dead letter")
    if not await Store(redis, where).replay(entry_id):
        raise DeadLetterNotFound(f"no webhook dead letter {entry} (already replayed or purged?)")
    return dead.dead_name(where, entry_id)


async def replay_webhook_dead(
    redis: Redis, keys: Keys, entry_ids: Sequence[str] | None = None, *, partitions: int = 1,
) -> tuple[list[str], list[str]]:
    """Re-deliver the named dead letters, or all present now (in every partition) when ``entry_ids`` is None.

    Returns ``(replayed names, skipped with reasons)``; see :func:`replay_webhook_each`.
    """
    replayed: list[str] = []
    skipped: list[str] = []
    async for name, why in replay_webhook_each(redis, keys, entry_ids, partitions=partitions):
        if name is not None:
            replayed.append(name)
        else:
            skipped.append(why)
    return replayed, skipped


async def replay_webhook_each(
    redis: Redis, keys: Keys, entry_ids: Sequence[str] | None = None, *, partitions: int = 1,
) -> AsyncIterator[tuple[str | None, str]]:
    """:func:`replay_webhook_dead` one letter at a time: ``(name, "")`` replayed, ``(None, why)`` skipped (one answer
    per named entry, in order), so a caller an outage interrupts still knows what went back (:func:`dead.gather`)."""
    if entry_ids is not None:
        for entry in entry_ids:
            try:
                name = await replay_one_webhook_dead(redis, keys, entry, partitions=partitions)
            except StreamcrewError as exc:
                yield None, str(exc)
            else:
                yield name, ""
        return
    for where in partition_keys(keys, partitions):
        store = Store(redis, where)
        async for page in dead.present(redis, where.webhooks_dead):
            for entry_id in page:
                if await store.replay(entry_id):
                    yield dead.dead_name(where, entry_id), ""
                else:
                    yield None, f"no webhook dead letter {dead.dead_name(where, entry_id)} (already replayed or purged?)"


async def purge_webhook_dead(redis: Redis, keys: Keys, *, partitions: int = 1) -> int:
    """Delete every webhook dead letter of every partition; returns how many there were."""
    return await dead.purge(redis, keys, partitions=partitions, stream=_webhooks_dead)
