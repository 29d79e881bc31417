"""Requests arriving together are published together: one ``Producer.publish_each`` per lane and partition.

While one publish is in flight, new requests wait in a queue of their lane and
partition; when it returns, everything queued goes out in the next call. Queues
are per partition so that on Redis Cluster a master that hangs holds up only
its own partitions' requests (an id-less one is placed on a partition whose
master answers: ``Producer.partition_for``). A lone request goes out
at once (no timer), so batching adds no latency, and under load it turns N
Redis round trips into one. The producer's guarantees hold per request: each
is idempotent on its id, in order, and a request over the size cap or that
cannot be encoded (InvalidRequest) fails alone. When Redis fails part-way
through a batch (one call per partition), each request hears its own outcome.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from streams.envelope import JobRequest
from streams.errors import InvalidRequest, RequestTooLarge
from streams.producer import PUBLISH_CHUNK, Producer, Published

log = logging.getLogger("streamcrew.gateway")


@dataclass(slots=True)
class _Lane:
    waiting: list[tuple[JobRequest, asyncio.Future[Published]]] = field(default_factory=list)
    flusher: asyncio.Task[None] | None = None


class PublishBatcher:
    """Coalesces concurrent publishes; safe to share across the requests of one event loop."""

    def __init__(self, producer: Producer, *, max_batch: int = PUBLISH_CHUNK) -> None:
        self.producer = producer
        self.max_batch = max_batch
        self._lanes: dict[tuple[str, int], _Lane] = {}  # (lane, partition) -> its queue

    async def publish(self, request: JobRequest, lane: str) -> Published:
        partition = self.producer.partition_for(request)
        state = self._lanes.setdefault((lane, partition), _Lane())
        future: asyncio.Future[Published] = asyncio.get_running_loop().create_future()
        state.waiting.append((request, future))
        if state.flusher is None:
            state.flusher = asyncio.create_task(self._flush(lane, partition, state))
        return await future

    async def _flush(self, lane: str, partition: int, state: _Lane) -> None:
        try:
            while state.waiting:
                # A request answered meanwhile (its deadline passed while Redis stalled) is not published: its caller
                # was told 503, and a job it never heard of would run, and run again when it sends the request again
                state.waiting = [item for item in state.waiting if not item[1].done()]
                batch, state.waiting = state.waiting[: self.max_batch], state.waiting[self.max_batch:]
                if batch:
                    await self._send(lane, partition, batch)
        finally:
            state.flusher = None
            _settle_error(state.waiting, RuntimeError("gateway shutting down"))  # only non-empty when cancelled
            state.waiting = []

    async def _send(self, lane: str, partition: int, batch: list[tuple[JobRequest, asyncio.Future[Published]]]) -> None:
        try:
            results = await self.producer.publish_each([request for request, _ in batch], priority=lane, partition=partition)
        except (RequestTooLarge, InvalidRequest) as exc:  # about one request, not Redis
            if len(batch) == 1:
                _settle_error(batch, exc)
                return
            for item in batch:  # one bad request must not fail the others: send each alone
                await self._send(lane, partition, [item])
        except BaseException as exc:  # handed to every waiting request, which answers for it
            _settle_error(batch, exc if isinstance(exc, Exception) else RuntimeError("gateway shutting down"))
            if not isinstance(exc, Exception):
                raise
        else:  # each its own outcome: a Redis error part-way through leaves the requests sent before it queued
            for (_, future), outcome in zip(batch, results, strict=True):
                if not future.done():
                    if isinstance(outcome, Exception):
                        future.set_exception(outcome)
                    else:
                        future.set_result(outcome)


def _settle_error(batch: list[tuple[JobRequest, asyncio.Future[Published]]], exc: Exception) -> None:
    for _, future in batch:
        if not future.done():
            future.set_exception(exc)
