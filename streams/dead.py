"""Dead letters: list, replay (the contract's one deliberate second result), purge.

With partitions (contract §10) each partition has its own dead stream; an entry ID is only unique within
one, so a dead letter of a partitioned prefix is named ``<entry ID>:<p>`` (as an id-less job id names its
partition). Listing merges the partitions oldest first; replay and purge reach every partition.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import cast

from redis.asyncio import Redis

from streams.envelope import DeadLetter, entry_ms, entry_order
from streams.errors import DeadLetterNotFound, JobIsLive, StreamcrewError
from streams.keys import LANES, Keys, partition_keys
from streams.scripts import Scripts

Entries = list[tuple[str, dict[str, str]]]
PAGE = 500
REASONS = ("invalid", "rejected", "exhausted", "expired")
# A dead letter's name: its entry ID, then ``:<partition>`` in a partitioned prefix.
DEAD_ENTRY_PATTERN = r"^\d{1,19}-\d{1,19}(?::\d{1,5})?$"
_NAMED = re.compile(r"^(\d+-\d+):(\d+)$")


def _named(entry: str, partitions: int) -> tuple[str, int | None]:
    """``(entry ID, partition)`` of a dead letter's name; the partition is None when the name gives none."""
    if partitions > 1 and (named := _NAMED.match(entry)):
        return named.group(1), int(named.group(2))
    return entry, None


async def list_dead(redis: Redis, keys: Keys, *, count: int = 100, after: str | None = None, partitions: int = 1) -> list[DeadLetter]:
    """Oldest first, ``count`` at most, those after the dead letter named ``after`` (a page's last ``entry_id``)."""
    if partitions <= 1:
        entries = cast(Entries, await redis.xrange(keys.dead, min=f"({after}" if after else "-", max="+", count=count))
        return [DeadLetter.from_entry(eid, fields) for eid, fields in entries]
    cursor, cursor_p = _named(after, partitions) if after else ("", None)
    last_p = partitions if cursor_p is None else cursor_p  # a bare entry ID: after it in every partition

    def low(p: int) -> str:
        if not after:
            return "-"
        return f"({cursor}" if p <= last_p else cursor  # order is (entry ID, partition)

    every = partition_keys(keys, partitions)
    pages = cast(list[Entries], await asyncio.gather(*(redis.xrange(k.dead, min=low(p), max="+", count=count) for p, k in enumerate(every))))
    merged = sorted(((entry_order(eid), p, eid, fields) for p, page in enumerate(pages) for eid, fields in page), key=lambda e: e[:2])
    return [DeadLetter.from_entry(f"{eid}:{p}", fields) for _, p, eid, fields in merged[:count]]


async def count_dead(redis: Redis, keys: Keys, *, partitions: int = 1) -> int:
    return sum([int(await redis.xlen(k.dead)) for k in partition_keys(keys, partitions)])


async def _locate(redis: Redis, keys: Keys, entry: str, partitions: int) -> tuple[Keys, str]:
    """The partition's keys and the entry ID of the dead letter named ``entry``.

    A bare entry ID in a partitioned prefix is looked for in every partition; found in several, it is ambiguous.
    """
    if partitions <= 1:
        return keys, entry
    entry_id, p = _named(entry, partitions)
    if p is not None:
        if p >= partitions:
            raise DeadLetterNotFound(f"no dead letter {entry}: partition {p} is outside 0-{partitions - 1}")
        return keys.in_partition(p), entry_id
    every = partition_keys(keys, partitions)
    found = [k for k in every if await redis.xrange(k.dead, min=entry_id, max=entry_id)]
    if not found:
        raise DeadLetterNotFound(f"no dead letter {entry}")
    if len(found) > 1:
        names = ", ".join(f"{entry_id}:{k.partition}" for k in found)
        raise StreamcrewError(f"dead letter {entry} is in {len(found)} partitions; name one of {names}")
    return found[0], entry_id


async def replay(redis: Redis, keys: Keys, entry: str, *, partitions: int = 1) -> str:
    """Send the dead letter named ``entry`` back to its lane with a fresh attempt budget; returns the job id."""
    where, entry_id = await _locate(redis, keys, entry, partitions)
    return await _replay_one(redis, where, entry_id)


async def _replay_one(redis: Redis, keys: Keys, entry_id: str) -> str:
    """Replay entry ``entry_id`` of ``keys.dead`` (one partition's, or the unpartitioned stream)."""
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


async def replay_all(redis: Redis, keys: Keys, *, reason: str | None = None, partitions: int = 1) -> tuple[list[str], list[str]]:
    """Replay every dead letter present now in every partition (not those that land while it runs), or those with ``reason``.

    Returns ``(replayed job ids, skipped with reasons)``.
    """
    replayed: list[str] = []
    skipped: list[str] = []
    for where in partition_keys(keys, partitions):
        async for page in _present(redis, where, reason):
            for eid in page:
                try:
                    replayed.append(await _replay_one(redis, where, eid))
                except StreamcrewError as exc:
                    skipped.append(str(exc))
    return replayed, skipped


async def purge(redis: Redis, keys: Keys, *, reason: str | None = None, partitions: int = 1) -> int:
    """Delete every dead letter of every partition, or those with ``reason``; returns how many went."""
    deleted = 0
    for where in partition_keys(keys, partitions):
        if reason is None:
            async with redis.pipeline(transaction=True) as pipe:
                pipe.xlen(where.dead)
                pipe.delete(where.dead)
                n, _ = await pipe.execute()
            deleted += int(n)
            continue
        async for page in _present(redis, where, reason):
            if page:
                deleted += int(await redis.xdel(where.dead, *page))
    return deleted
