"""Requests topic -> lanes: a batch of records becomes one publish per lane and one pipeline of dead letters.

No faust here: the agent in :mod:`consumers.kafka_bridge.app` hands batches in and acks their offsets
only after :meth:`RequestsIn.handle` returns, so a crash re-reads them and the Producer's idempotency
on the job id (the record key) turns the second delivery into a no-op.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field

from redis.asyncio import Redis

from consumers.kafka_bridge import metrics
from consumers.kafka_bridge.records import Coordinates, Invalid, Parsed, dead_letter, parse_request
from streams import metrics as stream_metrics
from streams.envelope import JobRequest
from streams.errors import InvalidRequest, RequestTooLarge
from streams.dead import DEAD_ONCE_S, OnceLetter, write_once
from streams.keys import Keys, keys_for_job
from streams.producer import Producer
from streams.outage import REDIS_DOWN, Backoff
from streams.scripts import Scripts
from streams.sizes import visible

log = logging.getLogger("streamcrew.kafka_bridge")

# A batch is written again after a Redis outage, and redis-py sends a command again after a lost reply (both copies
# run when Redis was only stalled); Kafka redelivers a batch whose offsets were not committed. Each invalid record's
# letter is written once (streams.dead.write_once): its guard (Keys.once, by the record's coordinates) names it.


@dataclass(frozen=True, slots=True)
class RecordIn:
    key: bytes | None
    value: bytes | None
    where: Coordinates


@dataclass(slots=True)
class BatchOutcome:
    """What one batch did; the agent yields it (tests read it through faust's test wrapper)."""

    published: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)


class RequestsIn:
    """Publishes request records through the project's Producer; dead-letters the invalid ones."""

    def __init__(self, redis: Redis, keys: Keys, *, max_request_bytes: int, partitions: int = 1, dead_once_s: int = DEAD_ONCE_S) -> None:
        self.redis = redis
        self.keys = keys
        self.partitions = partitions
        self.max_request_bytes = max_request_bytes
        self.dead_once_s = dead_once_s
        self._scripts = Scripts(redis)
        # Every job lands in partition crc32(id) mod N (contract §10), so a redelivered record meets its first copy.
        self.producer = Producer(redis, keys, max_request_bytes=max_request_bytes, partitions=partitions)

    async def handle(self, records: list[RecordIn]) -> BatchOutcome:
        """Publish or dead-letter every record; waits out Redis outages (the offsets wait with it)."""
        by_lane: dict[str, list[tuple[JobRequest, RecordIn]]] = defaultdict(list)
        invalid: list[tuple[Invalid, RecordIn]] = []
        seen: set[str] = set()
        repeats: list[str] = []  # a key again in this batch: the batch is published lane by lane, so without this
        for record in records:  # the copy in an earlier-published lane, not the first record, would be the job
            try:
                parsed = parse_request(record.key, record.value, record.where, max_bytes=self.max_request_bytes)
            except Exception as exc:  # the parser's own failure on a hostile record: that record is dead-lettered; let
                # out, it crashed the agent, and faust acked the whole batch with nothing published
                log.error("kafka-bridge: reading record %s failed (%s); it is dead-lettered", record.where.job_id, type(exc).__name__,
                          exc_info=True)
                parsed = Invalid(f"record could not be read ({type(exc).__name__})", record.where.job_id)
            if not isinstance(parsed, Parsed):
                invalid.append((parsed, record))
            elif (job_id := parsed.request.id) is not None and job_id in seen:
                repeats.append(job_id)
            else:
                if job_id is not None:
                    seen.add(job_id)
                by_lane[parsed.lane].append((parsed.request, record))
        outcome = BatchOutcome()
        backoff = Backoff("kafka-bridge publish")
        while True:
            try:
                with backoff.trying():
                    await self._write(by_lane, invalid, outcome)
                break
            except REDIS_DOWN as exc:
                outcome = BatchOutcome()
                await backoff.failed(exc)
            except Exception as exc:  # noqa: BLE001 - a refused write must not ack the batch (faust acks on the way out)
                log.error("kafka-bridge: publishing a batch of %d records failed (%s: %s); retrying, its offsets wait",
                          len(records), type(exc).__name__, exc)
                outcome = BatchOutcome()
                await backoff.failed(exc)
        backoff.ok()
        outcome.duplicates += repeats
        metrics.records("in", "published").inc(len(outcome.published))
        metrics.records("in", "duplicate").inc(len(outcome.duplicates))
        metrics.records("in", "invalid").inc(len(outcome.invalid))
        return outcome

    async def _write(self, by_lane: dict[str, list[tuple[JobRequest, RecordIn]]], invalid: list[tuple[Invalid, RecordIn]],
                     outcome: BatchOutcome) -> None:
        invalid = list(invalid)  # a retry after an outage starts from the parsed batch again
        for lane, pairs in by_lane.items():
            try:
                done = await self.producer.publish_many([request for request, _ in pairs], priority=lane)
            except (RequestTooLarge, InvalidRequest):  # one of them is refused: publish one by one, dead-letter that one
                done = []
                for request, record in pairs:
                    try:
                        done += await self.producer.publish_many([request], priority=lane)
                    except (RequestTooLarge, InvalidRequest) as exc:
                        invalid.append((Invalid(str(exc), request.id or record.where.job_id, request.agent), record))
            for published in done:
                (outcome.published if published.created else outcome.duplicates).append(published.job_id)
        if invalid:
            written = await self._dead_letters(invalid)
            for (problem, record), wrote in zip(invalid, written, strict=True):
                w = record.where
                log.warning("kafka-bridge: dead-lettered record %s/%d@%d (job %s)%s: %s", w.topic, w.partition, w.offset,
                            visible(problem.job_id[:80]), "" if wrote else " (its letter was written before)", visible(problem.error))
                if wrote:
                    stream_metrics.dead_letters("invalid").inc()
                outcome.invalid.append(problem.job_id)

    async def _dead_letters(self, invalid: list[tuple[Invalid, RecordIn]]) -> list[bool]:
        """Write each record's dead letter unless it was (write_once): one call per partition; which were written."""
        by_part: dict[Keys, list[int]] = defaultdict(list)
        for n, (problem, _) in enumerate(invalid):
            by_part[keys_for_job(self.keys, self.partitions, problem.job_id)].append(n)
        written = [False] * len(invalid)
        for part, ns in by_part.items():
            letters = [OnceLetter(part.once(record.where.token), dead_letter(problem, record.key, record.value, record.where))
                       for problem, record in (invalid[n] for n in ns)]
            reply = await write_once(self._scripts, part.dead, letters, guard_s=self.dead_once_s)
            for n, wrote in zip(ns, reply, strict=True):
                written[n] = wrote
        return written
