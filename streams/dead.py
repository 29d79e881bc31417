"""Dead letters: list, replay (the contract's one deliberate second result), purge."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import cast

from redis.asyncio import Redis

from streams.envelope import DeadLetter, entry_ms
from streams.errors import DeadLetterNotFound, JobIsLive, StreamcrewError
from streams.keys import LANES, Keys
from streams.scripts import Scripts

Entries = list[tuple[str, dict[str, str]]]
PAGE = 500
REASONS = ("invalid", "rejected", "exhausted", "expired")


async def list_dead(redis: Redis, keys: Keys, *, count: int = 100, start: str = "-") -> list[DeadLetter]:
    """Oldest first, ``count`` at most, from entry ID ``start``."""
    entries = cast(Entries, await redis.xrange(keys.dead, min=start, max="+", count=count))
    return [DeadLetter.from_entry(eid, fields) for eid, fields in entries]


async def count_dead(redis: Redis, keys: Keys) -> int:
    return int(await redis.xlen(keys.dead))


async def replay(redis: Redis, keys: Keys, entry_id: str) -> str:
    """Send one dead letter back to its lane with a fresh attempt budget; returns the job id."""
    entries = cast(Entries, await redis.xrange(keys.dead, min=entry_id, max=entry_id))
    if not entries:
        raise DeadLetterNotFound(f"no dead letter {entry_id}")
    letter = DeadLetter.from_entry(*entries[0])
    lane = keys.lane_name(letter.source_stream)
    if letter.source_stream != f"{keys.prefix}:requests:{lane}" or lane not in LANES:
        raise StreamcrewError(f"dead letter {entry_id} came from {letter.source_stream!r}, not a lane; cannot replay")
    fields = dict(letter.request)
    fields["id"] = letter.id
    fields.setdefault("submitted_at", str(entry_ms(letter.source_id)))
    args: list[str | int] = [entry_id, keys.job_prefix, f"{keys.prefix}:requests:", letter.id, lane, len(fields)]
    for k, v in fields.items():
        args += [k, v]
    new_id = await Scripts(redis).replay(keys=[keys.dead], args=args)
    if isinstance(new_id, list):
        raise JobIsLive(f"job {letter.id!r} of dead letter {entry_id} is {new_id[1]} again (submitted anew since it died); "
                        "replaying would take over that run: let it end first, or purge this dead letter")
    if not new_id:
        raise DeadLetterNotFound(f"dead letter {entry_id} vanished while replaying (replayed elsewhere?)")
    return letter.id


async def _present(redis: Redis, keys: Keys, reason: str | None) -> AsyncIterator[list[str]]:
    """Pages of the entry IDs of dead letters present now (with ``reason``, when given)."""
    last = cast(Entries, await redis.xrevrange(keys.dead, count=1))
    if not last:
        return
    end, start = last[0][0], "-"
    while True:
        entries = cast(Entries, await redis.xrange(keys.dead, min=start, max=end, count=PAGE))
        if not entries:
            return
        yield [eid for eid, fields in entries if reason is None or fields.get("reason") == reason]
        start = "(" + entries[-1][0]


async def replay_all(redis: Redis, keys: Keys, *, reason: str | None = None) -> tuple[list[str], list[str]]:
    """Replay every dead letter present now (not those that land while it runs), or those with ``reason``.

    Returns ``(replayed job ids, skipped with reasons)``.
    """
    replayed: list[str] = []
    skipped: list[str] = []
    async for page in _present(redis, keys, reason):
        for eid in page:
            try:
                replayed.append(await replay(redis, keys, eid))
            except StreamcrewError as exc:
                skipped.append(str(exc))
    return replayed, skipped


async def purge(redis: Redis, keys: Keys, *, reason: str | None = None) -> int:
    """Delete every dead letter, or those with ``reason``; returns how many went."""
    if reason is None:
        async with redis.pipeline(transaction=True) as pipe:
            pipe.xlen(keys.dead)
            pipe.delete(keys.dead)
            n, _ = await pipe.execute()
        return int(n)
    deleted = 0
    async for page in _present(redis, keys, reason):
        if page:
            deleted += int(await redis.xdel(keys.dead, *page))
    return deleted
