"""Dead letters: write once, list, replay (the contract's one deliberate second result), purge.

With partitions (contract §10) each partition has its own dead stream; an entry ID is only unique within
one, so a dead letter of a partitioned prefix is named ``<entry ID>:<p>`` (as an id-less job id names its
partition). Listing merges the partitions oldest first; replay and purge reach every partition.
The naming, merging and locating helpers take the dead stream as a parameter: the notifier's webhook
dead letters (``webhooks:dead``) follow the same rules.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, cast

from redis.asyncio import Redis

from streams.envelope import MALFORMED_LETTER, NOT_STARTED_IN_TIME, DeadLetter, entry_ms, entry_order
from streams.raw import ENTRY_ID, SOURCE_FIELD
from streams.errors import DeadLetterNotFound, JobIsLive, StreamcrewError
from streams.keys import LANES, STEP_SEPARATOR, Keys, lane_of, partition_keys
from streams.outage import REDIS_DOWN
from streams.scripts import RECEIPT_TTL_MS, Scripts, receipt_token
from streams.workflow import STEP_ID, WORKFLOW_AGENT

Entries = list[tuple[str, dict[str, str]]]
StreamOf = Callable[[Keys], str]  # which dead stream of a prefix's (or a partition's) keys
PAGE = 500
# The reasons a dead letter is listed with: those streamcrew writes (step_failed: a workflow a step failed, workflow.lua),
# and malformed, a letter whose fields are not ones streamcrew writes (a hand-made XADD): replay and purge take each
# (replay skips a malformed letter, saying why).
REASONS = ("invalid", "rejected", "exhausted", "expired", "too_large", "unencodable", "step_failed", MALFORMED_LETTER)
# A dead letter's name: its entry ID, then ``:<partition>`` in a partitioned prefix.
DEAD_ENTRY_PATTERN = r"^\d{1,19}-\d{1,19}(?::\d{1,5})?$"
_NAMED = re.compile(r"^(\d+-\d+):(\d+)$")
_ENTRY_NAME = re.compile(DEAD_ENTRY_PATTERN)
DEAD_ONCE_S = 7 * 24 * 3600  # STREAMCREW_JOB_TTL_S's default: a letter is written once while a job record would live


@dataclass(frozen=True, slots=True)
class OnceLetter:
    """A dead letter named by ``guard`` (a ``Keys.once`` key of the dead stream's slot); ``settles``: the entry it
    acks, if any."""

    guard: str
    letter: DeadLetter
    settles: str = ""


async def write_once(scripts: Scripts, dead: str, letters: Sequence[OnceLetter], *, guard_s: int = DEAD_ONCE_S,
                     acked_in: tuple[str, str] | None = None) -> list[bool]:
    """Write each letter unless its guard says it was, acking its entry in ``acked_in`` (stream, group) in the same
    call (dead_once.lua): a repeated call, or a crash between letter and ack, leaves one letter. Which were written."""
    stream, group = acked_in or (dead, "")
    args: list[str | int] = [guard_s * 1000, group]
    for one in letters:
        fields = one.letter.to_fields()
        args += [one.settles, len(fields), *(x for kv in fields.items() for x in kv)]
    reply = await scripts.dead_once(keys=[dead, stream, *(one.guard for one in letters)], args=args)
    return [bool(wrote) for wrote in reply]


def _named(entry: str, partitions: int) -> tuple[str, int | None]:
    """``(entry ID, partition)`` of a dead letter's name; the partition is None when the name gives none."""
    if partitions > 1 and (named := _NAMED.fullmatch(entry)):
        return named.group(1), int(named.group(2))
    return entry, None


def _job_dead(keys: Keys) -> str:
    return keys.dead


def dead_name(keys: Keys, entry_id: str) -> str:
    """The name of entry ``entry_id`` of a dead stream of ``keys``: the entry ID, then ``:<p>`` in a partition."""
    return entry_id if keys.partition is None else f"{entry_id}:{keys.partition}"


async def list_dead(redis: Redis, keys: Keys, *, count: int = 100, after: str | None = None, partitions: int = 1) -> list[DeadLetter]:
    """Oldest first, ``count`` at most, those after the dead letter named ``after`` (a page's last ``entry_id``)."""
    entries = await merged_entries(redis, keys, _job_dead, count=count, after=after, partitions=partitions)
    return [DeadLetter.from_entry(name, fields) for name, fields in entries]


async def merged_entries(redis: Redis, keys: Keys, stream: StreamOf, *, count: int, after: str | None, partitions: int) -> Entries:
    """``(name, fields)`` of the entries of every partition's ``stream``, oldest first, ``count`` at most,
    those after the entry named ``after``; each partition is read from there, so pages are exact."""
    if partitions <= 1:
        if after and (named := _NAMED.fullmatch(after)):  # a partitioned name where there are none: its entry ID
            after = named.group(1)
        return cast(Entries, await redis.xrange(stream(keys), min=f"({after}" if after else "-", max="+", count=count))
    cursor, cursor_p = _named(after, partitions) if after else ("", None)
    last_p = partitions if cursor_p is None else cursor_p  # a bare entry ID: after it in every partition

    def low(p: int) -> str:
        if not after:
            return "-"
        return f"({cursor}" if p <= last_p else cursor  # order is (entry ID, partition)

    every = partition_keys(keys, partitions)
    pages = cast(list[Entries], await asyncio.gather(*(redis.xrange(stream(k), min=low(p), max="+", count=count) for p, k in enumerate(every))))
    merged = sorted(((entry_order(eid), p, eid, fields) for p, page in enumerate(pages) for eid, fields in page), key=lambda e: e[:2])
    return [(dead_name(every[p], eid), fields) for _, p, eid, fields in merged[:count]]


async def count_dead(redis: Redis, keys: Keys, *, partitions: int = 1, stream: StreamOf = _job_dead) -> int:
    return sum([int(await redis.xlen(stream(k))) for k in partition_keys(keys, partitions)])


async def locate(
    redis: Redis, keys: Keys, entry: str, partitions: int, *, stream: StreamOf = _job_dead, what: str = "dead letter",
) -> tuple[Keys, str]:
    """The partition's keys and the entry ID of the entry of ``stream`` named ``entry``.

    A bare entry ID in a partitioned prefix is looked for in every partition; found in several, it is ambiguous.
    A name of another shape (a job id, say) is refused here: Redis' answer ("Invalid stream ID") names neither it nor the fix.
    """
    if not _ENTRY_NAME.fullmatch(entry):
        raise DeadLetterNotFound(f"no {what} {entry!r}: not an entry_id (<ms>-<seq>, then :<partition> with partitions, as list shows them)")
    if partitions <= 1:
        if _NAMED.fullmatch(entry):  # a partition's name where there are none: nothing has that name
            raise DeadLetterNotFound(f"no {what} {entry}: there are no partitions")
        return keys, entry
    entry_id, p = _named(entry, partitions)
    if p is not None:
        if p >= partitions:
            raise DeadLetterNotFound(f"no {what} {entry}: partition {p} is outside 0-{partitions - 1}")
        return keys.in_partition(p), entry_id
    every = partition_keys(keys, partitions)
    found = [k for k in every if await redis.xrange(stream(k), min=entry_id, max=entry_id)]
    if not found:
        raise DeadLetterNotFound(f"no {what} {entry}")
    if len(found) > 1:
        names = ", ".join(dead_name(k, entry_id) for k in found)
        raise StreamcrewError(f"{what} {entry} is in {len(found)} partitions; name one of {names}")
    return found[0], entry_id


class Replayed(NamedTuple):
    job_id: str
    entry: str  # the dead letter's name, as list shows it (a bare entry ID given, ':<p>' added in a partition)


async def replay(redis: Redis, keys: Keys, entry: str, *, partitions: int = 1) -> Replayed:
    """Send the dead letter named ``entry`` back to its lane with a fresh attempt budget."""
    where, entry_id = await locate(redis, keys, entry, partitions)
    return Replayed(await _replay_one(redis, where, entry_id), dead_name(where, entry_id))


async def _replay_one(redis: Redis, keys: Keys, entry_id: str) -> str:
    """Replay entry ``entry_id`` of ``keys.dead`` (one partition's, or the unpartitioned stream)."""
    entries = cast(Entries, await redis.xrange(keys.dead, min=entry_id, max=entry_id))
    if not entries:
        raise DeadLetterNotFound(f"no dead letter {entry_id}")
    letter = DeadLetter.from_entry(*entries[0])
    if letter.reason == MALFORMED_LETTER:
        raise StreamcrewError(f"dead letter {entry_id} cannot be replayed ({letter.error}); purge it")
    origin = keys.lane_name(letter.source_stream)  # a lane, or its resumed stream (replayed into the lane)
    lane = lane_of(origin)
    if letter.source_stream != f"{keys.lane_prefix}{origin}" or lane not in LANES:
        raise StreamcrewError(f"dead letter {entry_id} came from {letter.source_stream!r}, not a lane; cannot replay")
    if _ran_as_workflow(letter) and not await redis.exists(keys.workflow(letter.id)):
        raise StreamcrewError(
            f"dead letter {entry_id}: workflow {letter.id!r} ended over STREAMCREW_JOB_TTL_S ago and its state (its steps' "
            "results) has expired; replaying would run every step again, completed ones included: submit it anew, "
            "or purge this dead letter")
    fields = dict(letter.request)
    fields["id"] = letter.id
    if _passed(fields.get("deadline")):  # kept, it would expire the replayed job at once: an operator's replay means "run it"
        del fields["deadline"]
    fields.setdefault("submitted_at", str(entry_ms(letter.source_id)))
    if ENTRY_ID.fullmatch(letter.source_id):  # the entry the producer wrote stays named through the replay
        fields[SOURCE_FIELD] = letter.source_id
    args: list[str | int] = [entry_id, keys.job_prefix, keys.lane_prefix, letter.id, lane, RECEIPT_TTL_MS,
                             f"{origin}/{letter.last_source_id or letter.source_id}", len(fields)]
    for k, v in fields.items():
        args += [k, v]
    receipt = keys.receipt(receipt_token())  # a copy redis-py sends again answers from it, not "vanished"
    new_id = await Scripts(redis).replay(keys=[keys.dead, receipt, keys.slot_guard], args=args)
    if isinstance(new_id, list) and new_id[0] == "reused":
        raise JobIsLive(f"job id {letter.id!r} of dead letter {entry_id} was submitted anew since it died (that run is "
                        f"{new_id[1] or 'unknown'}); replaying would overwrite it: purge this dead letter")
    if isinstance(new_id, list):
        raise JobIsLive(f"job {letter.id!r} of dead letter {entry_id} is {new_id[1]} again (submitted anew since it died); "
                        "replaying would take over that run: let it end first, or purge this dead letter")
    if not new_id:
        raise DeadLetterNotFound(f"dead letter {entry_id} vanished while replaying (replayed elsewhere?)")
    return letter.id


def _ran_as_workflow(letter: DeadLetter) -> bool:
    """Whether the letter is a workflow's that started (its steps' results live in its state): one rejected, or
    expired before it started, has no state and nothing kept, and its replay is a first run."""
    if letter.agent != WORKFLOW_AGENT:
        return False
    return letter.reason == "step_failed" or (letter.reason == "expired" and letter.error != NOT_STARTED_IN_TIME)


def _passed(deadline: str | None) -> bool:
    """Whether a request's ``deadline`` (epoch ms) is behind us; one that is not a number is left for the worker to judge."""
    try:
        return deadline is not None and int(deadline) <= time.time() * 1000
    except ValueError:
        return False


async def present(redis: Redis, stream: str, reason: str | None = None) -> AsyncIterator[list[str]]:
    """Pages of the entry IDs of the dead letters in ``stream`` now (with ``reason``, when given), not later ones.
    A letter's reason is the one it is listed with: ``malformed`` for one streamcrew did not write, whatever it says."""
    async for entries in _present_entries(redis, stream, reason):
        yield [eid for eid, _ in entries]


async def _present_entries(redis: Redis, stream: str, reason: str | None = None) -> AsyncIterator[Entries]:
    """:func:`present`, with each entry's fields."""
    last = cast(Entries, await redis.xrevrange(stream, count=1))
    if not last:
        return
    end, start = last[0][0], "-"
    while True:
        entries = cast(Entries, await redis.xrange(stream, min=start, max=end, count=PAGE))
        if not entries:
            return
        yield [(eid, fields) for eid, fields in entries if reason is None or _listed_with(eid, fields, reason)]
        start = "(" + entries[-1][0]


def _listed_with(entry_id: str, fields: dict[str, str], reason: str) -> bool:
    """Whether the letter is listed with ``reason``. Its field is compared first: reading the whole letter (its request
    up to 1 MiB) is needed only where the field agrees (it may still be malformed) or for ``malformed`` itself."""
    if reason != MALFORMED_LETTER and fields.get("reason") != reason:
        return False
    return DeadLetter.from_entry(entry_id, fields).reason == reason


def _workflow_of(job_id: str) -> str | None:
    """The workflow a step's job id (``<workflow id>::<step id>``) belongs to, or None for other ids. A step id holds
    no ':', so the workflow's id is all before the last '::' (``wf:::a`` is step ``a`` of ``wf:``, not of ``wf``)."""
    at = job_id.rfind(STEP_SEPARATOR)
    return job_id[:at] if at > 0 and STEP_ID.fullmatch(job_id[at + len(STEP_SEPARATOR):]) else None


async def replay_all(redis: Redis, keys: Keys, *, reason: str | None = None, partitions: int = 1) -> tuple[list[str], list[str]]:
    """Replay every dead letter present now in every partition (not those that land while it runs), or those with ``reason``.

    Returns ``(replayed job ids, skipped with reasons)``; see :func:`replay_each`.
    """
    replayed: list[str] = []
    skipped: list[str] = []
    async for job_id, why in replay_each(redis, keys, reason=reason, partitions=partitions):
        if job_id is not None:
            replayed.append(job_id)
        else:
            skipped.append(why)
    return replayed, skipped


@dataclass
class Replay:
    """What a replay did. ``outage``: Redis went away part-way; ``not_replayed``: the named entries it had not
    done then (the first may have gone through, its answer lost)."""

    replayed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    outage: BaseException | None = None
    not_replayed: list[str] = field(default_factory=list)


async def gather(answers: AsyncIterator[tuple[str | None, str]], named: Sequence[str] = ()) -> Replay:
    """Collect a replay's answers (:func:`replay_each`'s shape); an outage ends it but keeps what went back.

    ``named``: the entries asked for, one answer each in order, so those not answered are ``not_replayed``."""
    done = Replay()
    try:
        async for name, why in answers:
            if name is not None:
                done.replayed.append(name)
            else:
                done.skipped.append(why)
    except REDIS_DOWN as exc:
        done.outage = exc
        done.not_replayed = list(named[len(done.replayed) + len(done.skipped):])
    return done


async def replay_each(redis: Redis, keys: Keys, *, reason: str | None = None, partitions: int = 1) -> AsyncIterator[tuple[str | None, str]]:
    """:func:`replay_all` one dead letter at a time: ``(job id, "")`` replayed, ``(None, why)`` skipped, so a caller
    an outage interrupts still knows what went back.

    A step's dead letter is left to its workflow's when that is replayed too: the workflow's replay runs the
    step again and removes the step's letter, so replaying both would run the step twice. A workflow and its
    steps share a partition (contract §10).
    """
    for where in partition_keys(keys, partitions):
        workflows = {fields.get("id", "") async for page in _present_entries(redis, where.dead, reason)
                     for _, fields in page if fields.get("agent") == WORKFLOW_AGENT}
        async for page in _present_entries(redis, where.dead, reason):
            for eid, fields in page:
                job_id = fields.get("id", "")
                if _workflow_of(job_id) in workflows:
                    continue  # its workflow's replay runs it and removes this letter: not a refusal to report
                try:
                    replayed = await _replay_one(redis, where, eid)
                except StreamcrewError as exc:
                    yield None, str(exc)
                else:
                    yield replayed, ""


async def purge(redis: Redis, keys: Keys, *, reason: str | None = None, partitions: int = 1, stream: StreamOf = _job_dead) -> int:
    """Delete every dead letter of every partition's ``stream``, or those with ``reason``; returns how many went."""
    deleted = 0
    for where in partition_keys(keys, partitions):
        if reason is None:
            async with redis.pipeline(transaction=True) as pipe:
                pipe.xlen(stream(where))
                pipe.delete(stream(where))
                n, _ = await pipe.execute()
            deleted += int(n)
            continue
        async for page in present(redis, stream(where), reason):
            if page:
                deleted += int(await redis.xdel(stream(where), *page))
    return deleted
