"""Results stream -> results topic: group ``kafka-bridge`` reads, Kafka acknowledges, only then XACK.

:class:`ResultsReader` is the :class:`streams.runtime.EntryHandler` of the group: it turns entries
into :class:`ResultBatch` es and hands them to the faust agent (through a channel). The agent calls
:meth:`ResultsOut.forward`: produce every record keyed by job id, await each send's future (the
broker's acknowledgement), XACK the acknowledged entries in one call. A crash anywhere before the
XACK leaves the entries pending; another bridge reclaims them after the lease and sends them again
(at-least-once: consumers dedupe on the job id, as webhook receivers do).

An entry that is dead-lettered instead (too large for Kafka, malformed) is acked in the same script call as its
letter is written (streams.dead.write_once), guarded by the entry's ID: a crash leaves no letter without its ack,
and a call sent again (a lost reply, a retry after an outage) writes no second letter.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka.errors import MessageSizeTooLargeError, RecordTooLargeError
from redis.asyncio import Redis

from consumers.kafka_bridge import metrics
from consumers.kafka_bridge.records import result_record
from streams import metrics as stream_metrics
from streams.dead import DEAD_ONCE_S, OnceLetter, write_once
from streams.envelope import DeadLetter, now_ms
from streams.errors import DecodeError
from streams.keys import Keys
from streams.outage import until_redis_answers
from streams.raw import repaired_fields
from streams.scripts import Scripts
from streams.sizes import visible
from streams.entries import Entry, Release, Slot

log = logging.getLogger("streamcrew.kafka_bridge")

KAFKA_BRIDGE_GROUP = "kafka-bridge"

# Sends a record and returns a future resolved by the broker's acknowledgement (faust's ``Topic.send``).
Send = Callable[[bytes, bytes], Awaitable[Awaitable[Any]]]


@dataclass(frozen=True, slots=True)
class ResultRecord:
    entry_id: str
    key: bytes
    value: bytes


@dataclass(frozen=True, slots=True)
class ResultBatch:
    stream: str
    records: tuple[ResultRecord, ...]


def guard(keys: Keys, entry_id: str) -> str:
    """The once-key of a results entry's dead letter: by the partition's results stream and the entry's ID."""
    return keys.once(f"results:{entry_id}")


# What Kafka refuses for good: sending such a record again after the lease would fail forever.
TOO_LARGE = (MessageSizeTooLargeError, RecordTooLargeError)


def refused_for_size(ack: object) -> bool:
    """Whether a send failed for a record Kafka takes at no size: faust wraps aiokafka's error (ProducerSendError
    raised from it), so the chain is walked, not only the error at its top."""
    seen = 0
    while isinstance(ack, BaseException) and seen < 10:
        if isinstance(ack, TOO_LARGE):
            return True
        ack, seen = ack.__cause__ or ack.__context__, seen + 1
    return False


class ResultsOut:
    """Produces result batches and XACKs each entry only after Kafka acknowledged it.

    A record Kafka refuses as too large (over the producer's ``max_request_size`` or the topic's
    ``max.message.bytes``) is dead-lettered in the dead stream of the partition (of ``partitions``) it came from
    (reason ``too_large``) and acked with it; any other refusal leaves the entry pending, sent again after the lease."""

    def __init__(self, redis: Redis, *, group: str = KAFKA_BRIDGE_GROUP, send: Send, release: Release | None = None,
                 partitions: Sequence[Keys] = (), dead_once_s: int = DEAD_ONCE_S) -> None:
        self.redis = redis
        self.group = group
        self.send = send
        self.release: Release = release or (lambda stream, entry_id, settled=True: None)
        self.keys_of = {keys.results: keys for keys in partitions}
        self.dead_once_s = dead_once_s
        self._scripts = Scripts(redis)

    async def forward(self, batch: ResultBatch) -> list[str]:
        """Returns the entry IDs acknowledged by Kafka and then XACKed; the others stay pending (their slots are freed)."""
        acked: list[str] = []
        try:
            acked = await self._forward(batch)
            return acked
        finally:
            for r in batch.records:  # those not acked stay pending: sent again after the lease
                self.release(batch.stream, r.entry_id, settled=r.entry_id in acked)

    async def _send(self, record: ResultRecord) -> Any:
        """The broker's acknowledgement, or the exception that refused the record (at send or at the ack)."""
        try:
            return await (await self.send(record.key, record.value))
        except Exception as exc:  # noqa: BLE001 - one record's refusal is its own, not its batch's
            return exc

    async def _forward(self, batch: ResultBatch) -> list[str]:
        acks = await asyncio.gather(*(self._send(r) for r in batch.records))
        sent = [r.entry_id for r, ack in zip(batch.records, acks, strict=True) if not isinstance(ack, BaseException)]
        too_large = [(r, ack) for r, ack in zip(batch.records, acks, strict=True) if refused_for_size(ack) and batch.stream in self.keys_of]
        if too_large:  # acked with their letters
            await self._dead_letters(batch.stream, too_large)
        done = sent + [r.entry_id for r, _ in too_large]
        failed = len(batch.records) - len(done)
        if failed:
            first = next(a for a in acks if isinstance(a, BaseException))
            log.warning("kafka-bridge: Kafka refused %d of %d result records (%s: %s); they stay pending and are sent again after the lease",
                        failed, len(batch.records), type(first).__name__, first)
        if sent:  # XACK in the stream (partition) the entries came from
            await until_redis_answers("kafka-bridge xack", lambda: self.redis.xack(batch.stream, self.group, *sent))
        metrics.records("out", "produced").inc(len(done))
        metrics.records("out", "failed").inc(failed)
        return done


    async def _dead_letters(self, stream: str, refused: list[tuple[ResultRecord, BaseException]]) -> None:
        keys = self.keys_of[stream]
        letters = []
        for record, exc in refused:
            error = (f"Kafka refused the result record as too large ({len(record.value)} bytes; {type(exc).__name__}): raise the "
                     "results topic's max.message.bytes, or lower STREAMCREW_MAX_RESULT_BYTES")
            letter = DeadLetter(id=record.key.decode(errors="replace"), agent="", reason="too_large", error=error, source_stream=stream,
                                source_id=record.entry_id, attempts=0, dead_at=now_ms(), request={})
            letters.append(OnceLetter(guard(keys, record.entry_id), letter, settles=record.entry_id))
        written = await until_redis_answers("kafka-bridge dead letter", lambda: write_once(
            self._scripts, keys.dead, letters, guard_s=self.dead_once_s, acked_in=(stream, self.group)))
        for (record, _), one, wrote in zip(refused, letters, written, strict=True):
            if wrote:
                stream_metrics.dead_letters("too_large").inc()
                metrics.records("out", "too_large").inc()
            log.warning("kafka-bridge: result %s (entry %s) is %d bytes, too large for Kafka; dead-lettered%s", visible(one.letter.id[:80]),
                        record.entry_id, len(record.value), "" if wrote else " (its letter was written before)")


class ResultsReader:
    """The group's entry handler: entries -> :class:`ResultBatch` handed to ``deliver`` (the faust channel).

    ``partitions`` are the streamcrew partitions read (contract §10): a malformed entry is dead-lettered in its own.
    """

    def __init__(self, redis: Redis, partitions: Sequence[Keys], *, deliver: Callable[[ResultBatch], Awaitable[Any]], release: Release,
                 let_go: Callable[[list[Slot]], Awaitable[int]], group: str = KAFKA_BRIDGE_GROUP, dead_once_s: int = DEAD_ONCE_S) -> None:
        self.redis = redis
        self.keys_of = {keys.results: keys for keys in partitions}
        self.dead_once_s = dead_once_s
        self._scripts = Scripts(redis)
        self.deliver = deliver
        self.release = release
        self.let_go = let_go
        self.group = group

    async def on_entries(self, stream: str, entries: list[Entry], *, reclaimed: bool) -> None:
        records: list[ResultRecord] = []
        gone: list[str] = []
        malformed: list[tuple[str, dict[str, str], str]] = []
        for entry_id, fields in entries:
            if fields is None:  # trimmed or deleted while pending: nothing to send
                gone.append(entry_id)
                continue
            try:
                key, value = result_record(fields)
            except DecodeError as exc:
                malformed.append((entry_id, fields, exc.reason))
                continue
            records.append(ResultRecord(entry_id, key, value))
        if malformed:  # acked with their letters
            await self._dead_letters(stream, malformed)
        if gone:
            await self.redis.xack(stream, self.group, *gone)
        for entry_id in [*gone, *(m[0] for m in malformed)]:
            self.release(stream, entry_id)
        if records:
            await self.deliver(ResultBatch(stream, tuple(records)))

    async def _dead_letters(self, stream: str, malformed: list[tuple[str, dict[str, str], str]]) -> None:
        keys = self.keys_of[stream]
        letters = []
        for entry_id, raw, reason in malformed:
            fields = repaired_fields(raw)  # bytes that were not UTF-8 become U+FFFD: the letter's JSON can hold the rest
            letter = DeadLetter(id=fields.get("id") or entry_id, agent=fields.get("agent", ""), reason="invalid",
                                error=f"result event is malformed: {reason}", source_stream=stream, source_id=entry_id,
                                attempts=0, dead_at=now_ms(), request=dict(fields))
            letters.append(OnceLetter(guard(keys, entry_id), letter, settles=entry_id))
        written = await write_once(self._scripts, keys.dead, letters, guard_s=self.dead_once_s, acked_in=(stream, self.group))
        for (entry_id, _, reason), wrote in zip(malformed, written, strict=True):
            if wrote:
                stream_metrics.dead_letters("invalid").inc()
                metrics.records("out", "invalid").inc()
            log.warning("kafka-bridge: result entry %s is malformed (%s); dead-lettered%s", entry_id, visible(reason),
                        "" if wrote else " (its letter was written before)")

    async def hand_back(self, slots: list[Slot]) -> int:
        """Stopping with entries unsent: those still ours are marked idle past the lease, so any bridge reclaims them at its
        next sweep (``let_go``: the runtime's :meth:`streams.leases.Leases.let_go`); one another bridge took over meanwhile
        stays with it, which sends it (taken back, it would be sent twice)."""
        return await self.let_go(slots)

    async def tick(self) -> None:
        return None

    async def taken_over(self, slots: list[Slot]) -> None:
        """Sends another bridge took over go on here too: the topic is at least once, keyed by job id."""
