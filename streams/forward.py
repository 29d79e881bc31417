"""Raw requests XADDed, with an id, into a partition that id does not belong to are moved to their own (contract §10).

Producers place a request with an id in partition crc32(id) mod N, so a repeated id meets its first copy and any
process finds the job by its id alone. A raw XADD may name any partition's lane: run where it was written, such a
job would be found by no lookup of its id (404 at the gateway, exit 1 in ``streamcrew job``) and would run a second
time when the same id came through a producer. The worker publishes it again instead, through ``publish.lua`` in
the same lane of the id's own partition (idempotent on the id), and then acknowledges the entry: a crash in between
leaves the entry pending, and the next delivery publishes it again, which finds the job and adds nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from redis.asyncio import Redis

from streams.entries import Slot
from streams.envelope import JobRequest
from streams.errors import StreamcrewError
from streams.job_ids import is_step_entry, reserved_id_problem
from streams.keys import Keys, partition_of
from streams.outage import until_redis_answers
from streams.producer import Producer
from streams.raw import SOURCE_FIELD

log = logging.getLogger("streamcrew.jobs")


def home_partition(keys: Keys, partitions: int, raw: Mapping[str, str], request: JobRequest) -> int | None:
    """The partition a claimed entry of ``keys``' partition must move to, or None to run it where it is.

    Only a producer's kind of request moves: an entry the system wrote again (a retry, a hand-back, a replay: it names
    its first entry in ``source_id``) stays with its job's record, a workflow step with its workflow, and an id a
    producer would refuse (a generated shape) is run where it is, as before. (The caller also keeps an entry whose
    id has a record in ``keys``' partition: a rejection at claim, or a run before moves, is that id's job.)
    """
    if partitions <= 1 or keys.partition is None or request.id is None or SOURCE_FIELD in raw:
        return None
    if is_step_entry(request.id, raw.get("parent"), raw.get("step")) or reserved_id_problem(request.id):
        return None
    home = partition_of(request.id, partitions)
    return None if home == keys.partition else home


class Forwarder:
    """Moves requests through a :class:`~streams.producer.Producer` of the whole prefix; ``moved(stream, entry_id)``
    then acknowledges the entry, ``refused(stream, lane, entry_id, job_id, raw, why)`` ends it rejected where it is
    (a producer's refusal, which no retry would change), ``failed(stream, entry_id)`` lets it go unsettled after an
    error nothing expects (it stays pending, and is taken up again after its lease)."""

    def __init__(self, redis: Redis, keys: Keys, partitions: int, *, max_request_bytes: int,
                 moved: Callable[[str, str], None], refused: Callable[[str, str, str, str, dict[str, str], str], None],
                 failed: Callable[[str, str], None]) -> None:
        self._producer = Producer(redis, keys, max_request_bytes=max_request_bytes, partitions=partitions)
        self._moved, self._refused, self._failed = moved, refused, failed
        self._told = False
        self._moves: dict[Slot, asyncio.Task[None]] = {}  # under way, or stopped by a drain (cancelled)

    def start(self, stream: str, lane: str, entry_id: str, job_id: str, raw: dict[str, str], request: JobRequest,
              *, submitted_at: int, found_in: int) -> asyncio.Task[None]:
        """:meth:`move` as a task, kept while it runs and, once a drain stopped it, until :meth:`stopped` says so."""
        slot = (stream, entry_id)
        task = self._moves[slot] = asyncio.create_task(
            self.move(stream, lane, entry_id, job_id, raw, request, submitted_at=submitted_at, found_in=found_in))
        task.add_done_callback(lambda t: None if t.cancelled() else self._moves.pop(slot, None))
        return task

    def stopped(self, slots: list[Slot]) -> list[Slot]:
        """Of ``slots``, those whose move a drain stopped: still pending here, to be let go (``Leases.let_go``)."""
        return [slot for slot in slots if (task := self._moves.pop(slot, None)) is not None and task.cancelled()]

    async def move(self, stream: str, lane: str, entry_id: str, job_id: str, raw: dict[str, str], request: JobRequest,
                   *, submitted_at: int, found_in: int) -> None:
        """The entry's work, run as its slot's task: publish it again, through an outage too, then let it go."""
        try:
            await until_redis_answers(f"move of job {job_id}", lambda: self._forward(request, lane, submitted_at, found_in))
        except StreamcrewError as exc:
            self._refused(stream, lane, entry_id, job_id, raw, str(exc))
            return
        except Exception:  # its slot would be held, and its lease renewed, by a task that ended: pending for good
            log.exception("job=%s: moving it to its own partition failed; it is taken up again after its lease", job_id)
            self._failed(stream, entry_id)
            return
        self._moved(stream, entry_id)

    async def _forward(self, request: JobRequest, lane: str, submitted_at: int, found_in: int) -> None:
        """Publish ``request`` to ``lane`` of its own partition, keeping when it was first submitted."""
        (published,) = await self._producer.publish_many([request.model_copy(update={"submitted_at": submitted_at})], priority=lane)
        line = "job=%s XADDed to partition %d, whose id belongs in partition %d (crc32(id) mod N): moved there (%s)%s"
        args = (published.job_id, found_in, partition_of(published.job_id, len(self._producer.partitions)),
                "queued" if published.created else f"already {published.status}",
                "; producers place ids themselves, raw XADDs should name that partition's lane" if not self._told else "")
        log.log(logging.DEBUG if self._told else logging.WARNING, line, *args)
        self._told = True
