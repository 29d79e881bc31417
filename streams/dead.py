"""Dead letters: list, replay (the contract's one deliberate second result), purge."""

from __future__ import annotations

from typing import cast

from redis.asyncio import Redis

from streams.envelope import DeadLetter, entry_ms
from streams.errors import DeadLetterNotFound, StreamcrewError
from streams.keys import LANES, Keys
from streams.scripts import Scripts

Entries = list[tuple[str, dict[str, str]]]


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
    if not new_id:
        raise DeadLetterNotFound(f"dead letter {entry_id} vanished while replaying (replayed elsewhere?)")
    return letter.id


async def replay_all(redis: Redis, keys: Keys) -> tuple[list[str], list[str]]:
    """Replay every dead letter present now (not those that land while it runs).

    Returns ``(replayed job ids, skipped with reasons)``.
    """
    last = cast(Entries, await redis.xrevrange(keys.dead, count=1))
    if not last:
        return [], []
    end = last[0][0]
    replayed: list[str] = []
    skipped: list[str] = []
    start = "-"
    while True:
        entries = cast(Entries, await redis.xrange(keys.dead, min=start, max=end, count=500))
        if not entries:
            return replayed, skipped
        for eid, _ in entries:
            try:
                replayed.append(await replay(redis, keys, eid))
            except StreamcrewError as exc:
                skipped.append(str(exc))
        start = "(" + entries[-1][0]


async def purge(redis: Redis, keys: Keys) -> int:
    """Delete every dead letter; returns how many there were."""
    n = int(await redis.xlen(keys.dead))
    await redis.delete(keys.dead)
    return n
