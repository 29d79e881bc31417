"""Publishing requests: one job per id, lanes by priority, batches in one round trip."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import orjson
from redis.asyncio import Redis

from streams import metrics
from streams.envelope import JobRequest, flat, lane_for_priority, lane_for_request, now_ms
from streams.job_ids import reserved_id_problem
from streams.raw import request_bytes
from streams.errors import InvalidRequest, RequestTooLarge
from streams.groups import ensure_groups, standard_groups
from streams.keys import Keys, lane_of, partition_keys, partition_of
from streams.layout import claim_layout
from streams.request_checks import name_problem, text_problem, webhook_url_problem
from streams.scripts import RECEIPT_TTL_MS, Scripts, receipt_token
from streams.slow_slots import SlotSlow, slot_of, slow_slots_of
from streams.workflow import WORKFLOW_AGENT, Workflow

PUBLISH_CHUNK = 500
# A chunk goes to publish.lua as one argument, each request's fields JSON-escaped once more: bounded in size too, so
# many large requests together (a gateway batch of concurrent ones) never make one call over Redis' argument limit
# (512 MB by default: counting characters, not bytes, is near enough), nor one that holds Redis up while it is read.
PUBLISH_CHUNK_BYTES = 8 * 1024 * 1024


def chunks_of(indexes: list[int], size_of: Callable[[int], int]) -> Iterator[list[int]]:
    """``indexes`` in order, cut into calls of at most ``PUBLISH_CHUNK`` requests and ``PUBLISH_CHUNK_BYTES`` (one
    larger request alone)."""
    chunk: list[int] = []
    size = 0
    for i in indexes:
        n = size_of(i)
        if chunk and (len(chunk) >= PUBLISH_CHUNK or size + n > PUBLISH_CHUNK_BYTES):
            yield chunk
            chunk, size = [], 0
        chunk.append(i)
        size += n
    if chunk:
        yield chunk
RECORD_EXTRAS = ("tenant", "webhook", "traceparent")


@dataclass(frozen=True, slots=True)
class Published:
    """What a publish did: ``created`` is False when the id already named a live or finished job.

    ``tenant`` is the tenant of the record the id names: the request's for a created job, else the one the existing
    record named when its ``status`` was read (in the same script), so a tenant-bound caller can refuse another's.
    ``lane`` likewise: the caller's for a created job, else the lane (priority) the existing job was queued in.
    """

    job_id: str
    status: str
    created: bool
    lane: str
    tenant: str | None = None


def check_not_generated(request: JobRequest) -> None:
    """Explicit ids never collide with the system's: generated shapes and workflow step ids are reserved."""
    if request.id is not None and (problem := reserved_id_problem(request.id)):
        raise InvalidRequest(f"job id {request.id[:80]!r}: {problem}")


def check_request(request: JobRequest) -> None:
    """What the producer refuses in a request besides its size (InvalidRequest): a reserved id, text no stream entry
    can carry, a webhook that is no absolute http(s) URL, a tenant that is no name. An edge that takes requests in
    batches (the Kafka bridge) checks each with it, so one refused request cannot refuse its batch."""
    check_not_generated(request)
    for name in ("agent", "id", "webhook", "tenant", "traceparent"):
        if isinstance(value := getattr(request, name), str) and (problem := text_problem(name, value)):
            raise InvalidRequest(f"request for agent {request.agent!r}: {problem}")
    if request.webhook is not None and (problem := webhook_url_problem(request.webhook)):
        raise InvalidRequest(f"request for agent {request.agent!r}: {problem}")
    if request.tenant is not None and (problem := name_problem("tenant", request.tenant)):
        raise InvalidRequest(f"request for agent {request.agent!r}: {problem}")


# A request and its stream fields, encoded and checked once.
Encoded = tuple[JobRequest, dict[str, str]]


class Producer:
    """Puts requests into the lanes; safe to share across tasks."""

    def __init__(self, redis: Redis, keys: Keys, *, max_request_bytes: int = 1_048_576, partitions: int = 1) -> None:
        self.redis = redis
        self.keys = keys
        self.max_request_bytes = max_request_bytes
        self.partitions = partition_keys(keys, partitions)
        self._scripts = Scripts(redis)
        self._layout_claimed = False
        self._grouped: set[int] = set()  # partitions whose groups this producer made
        # Redis Cluster, several partitions: a master that hangs holds up only its own partitions' publishes, and
        # id-less requests go to the other masters' partitions meanwhile (streams.slow_slots)
        self._slow = slow_slots_of(redis) if len(self.partitions) > 1 else None
        # Id-less requests take turns from a random partition: a producer that lives for one request (a CLI
        # `submit`, a producer made per web request) would otherwise put every one of them into partition 0.
        first = random.randrange(len(self.partitions))
        self._next_idless: Iterator[int] = itertools.cycle([*range(first, len(self.partitions)), *range(first)])

    async def ensure_groups(self, partitions: Iterable[int] | None = None) -> None:
        """Refuse a prefix laid out in another N (streams.layout), once; then make the lanes' groups of ``partitions``
        (default: every one), once each. A publish makes only its own partitions' groups."""
        if not self._layout_claimed:
            if self.keys.partition is None:
                await claim_layout(self.redis, self.keys, len(self.partitions))
            self._layout_claimed = True
        for p in range(len(self.partitions)) if partitions is None else partitions:
            if p not in self._grouped:
                await ensure_groups(self.redis, standard_groups(self.partitions[p]))
                self._grouped.add(p)

    def partition_for(self, request: JobRequest) -> int:
        """crc32(id) mod N for a request with an id (a repeat meets its first copy); id-less ones take turns, from a
        random partition, passing over those whose Redis Cluster master is slow while another is not."""
        if request.id:
            return partition_of(request.id, len(self.partitions))
        first = next(self._next_idless)
        if self._slow is None:
            return first
        p = first
        for _ in range(len(self.partitions)):
            if not self._slow.slow(slot_of(self.partitions[p].slot_guard)):
                return p
            p = next(self._next_idless)
        return first  # every master slow: in turn, as always

    async def publish(
        self,
        agent: str,
        data: dict[str, Any],
        *,
        priority: int | str | None = None,
        id: str | None = None,
        webhook: str | None = None,
        tenant: str | None = None,
        max_attempts: int | None = None,
        timeout_s: float | None = None,
        deadline: int | None = None,
        traceparent: str | None = None,
    ) -> Published:
        """Publish one request; returns its job id. Idempotent on ``id``.

        Without ``priority`` the lane is the one a ``priority`` 0-10 in ``data`` names (or in
        ``data["data"]``, the first design's shape), else ``normal``.
        """
        request = JobRequest(
            agent=agent, data=data, id=id, webhook=webhook, tenant=tenant, max_attempts=max_attempts,
            timeout_s=timeout_s, deadline=deadline, traceparent=traceparent, submitted_at=now_ms(),
        )
        (published,) = await self.publish_many([request], priority=priority)
        return published

    async def publish_workflow(
        self,
        workflow: Workflow,
        *,
        priority: int | str | None = None,
        webhook: str | None = None,
        tenant: str | None = None,
        traceparent: str | None = None,
    ) -> Published:
        """Publish a :class:`~streams.workflow.Workflow` (contract §9); idempotent on its id."""
        return await self.publish(WORKFLOW_AGENT, workflow.to_data(), priority=priority, id=workflow.id, webhook=webhook,
                                  tenant=tenant, traceparent=traceparent)

    async def publish_many(self, requests: Iterable[JobRequest], *, priority: int | str | None = None) -> list[Published]:
        """Publish requests to the ``priority`` lane, in chunks of ``PUBLISH_CHUNK`` per partition; order is kept.

        Without ``priority`` each request goes to the lane its data names, as in :meth:`publish`.
        A request with a reserved id, or one too large, fails the call before anything is published.
        A Redis error is raised as it came; :meth:`publish_each` says which requests went out before it.
        """
        outcomes = await self.publish_each(requests, priority=priority)
        for outcome in outcomes:
            if isinstance(outcome, Exception):
                raise outcome
        return cast(list[Published], outcomes)

    async def publish_each(self, requests: Iterable[JobRequest], *, priority: int | str | None = None,
                           partition: int | None = None) -> list[Published | Exception]:
        """As :meth:`publish_many`, one outcome per request: its :class:`Published`, or the Redis error of its call.

        A batch takes one call per lane, partition and chunk; when one fails, the requests earlier calls
        carried are queued all the same (a caller told otherwise would send an id-less one again: two jobs).
        No call is made after a failure in its partition: its requests get the same error. On one Redis that is
        every later call; on Redis Cluster each partition's calls go at once beside the others', so a master that
        hangs holds up only its own partitions' requests. ``partition``: all go there (placed by :meth:`partition_for`).
        """
        encoded = [(request, self._fields_of(request)) for request in requests]
        fixed = None if priority is None else lane_for_priority(priority)
        await self.ensure_groups(())  # the layout
        calls: dict[int, dict[str, list[int]]] = {}  # partition -> lane -> the requests' indexes, in order
        for index, (request, _) in enumerate(encoded):
            lane_name = fixed or lane_for_request(None, request.data)
            p = self.partition_for(request) if partition is None else partition
            calls.setdefault(p, {}).setdefault(lane_name, []).append(index)
        out: list[Published | Exception | None] = [None] * len(encoded)
        if self._slow is None:
            failed: Exception | None = None
            for p, lanes in calls.items():
                failed = await self._publish_partition(p, lanes, encoded, out, failed)
        else:
            await asyncio.gather(*(self._publish_partition(p, lanes, encoded, out, None) for p, lanes in calls.items()))
        return cast(list[Published | Exception], out)

    async def _publish_partition(self, p: int, lanes: dict[str, list[int]], encoded: list[Encoded],
                                 out: list[Published | Exception | None], failed: Exception | None) -> Exception | None:
        """Partition ``p``'s calls in turn, each request's outcome put in ``out``; returns the failure that stopped them
        (``failed``: one before them, so none is made)."""
        for lane_name, indexes in lanes.items():
            for chunk in chunks_of(indexes, lambda i: sum(map(len, encoded[i][1].values()))):  # characters: near enough
                outcomes: list[Published | Exception] = [failed] * len(chunk) if failed else []
                if not failed:
                    try:
                        outcomes.extend(await self._publish_watched(p, [encoded[i] for i in chunk], lane_name))
                    except Exception as exc:  # noqa: BLE001 - the outcome of this call's requests and of the calls not made
                        failed = exc
                        outcomes = [exc] * len(chunk)
                for i, outcome in zip(chunk, outcomes, strict=True):
                    out[i] = outcome
        return failed

    async def _publish_watched(self, p: int, chunk: Sequence[Encoded], lane_name: str) -> list[Published]:
        """One call (its partition's groups made first, once). On Redis Cluster one unanswered past the slow-call time
        marks its master slow, so the id-less requests placed after it go elsewhere, and is still waited for: its
        requests' answer is what Redis did, never a guess."""
        keys = self.partitions[p]

        async def publish() -> list[Published]:
            await self.ensure_groups((p,))
            return await self._publish_chunk(keys, chunk, lane_name)

        if self._slow is None:
            return await publish()
        try:
            return await self._slow.call(slot_of(keys.slot_guard), publish())
        except SlotSlow as slow:
            assert slow.running is not None
            return cast(list[Published], await slow.running)

    def _fields_of(self, request: JobRequest) -> dict[str, str]:
        """The request's stream fields, or the error that refuses it (checked for every request before any is sent)."""
        check_request(request)
        try:
            fields = request.to_fields()
        except ValueError as exc:  # built without validation (model_construct) and not encodable
            raise InvalidRequest(f"request for agent {request.agent!r}: data {exc}") from None
        size = request_bytes(fields)
        if size > self.max_request_bytes:
            raise RequestTooLarge(f"request for agent {request.agent!r} is {size} bytes, over the {self.max_request_bytes}-byte limit")
        return fields

    async def _publish_chunk(self, keys: Keys, chunk: Sequence[Encoded], lane_name: str) -> list[Published]:
        jobs = []
        for request, fields in chunk:
            extra = {k: fields[k] for k in RECORD_EXTRAS if k in fields}
            jobs.append((request.id or "", request.agent, str(request.submitted_at or ""), flat(fields), flat(extra)))
        args: list[str | int] = [keys.job_prefix, lane_name, orjson.dumps(jobs).decode(), keys.generated_id(""), RECEIPT_TTL_MS]
        receipt = keys.receipt(receipt_token())  # one per call: a copy redis-py sends again shares it
        reply = await self._scripts.publish(keys=[keys.lane(lane_name), keys.clock, receipt, keys.slot_guard], args=args)
        published = [
            Published(job_id=str(jid), status=str(st), created=bool(int(created)), lane=lane_of(str((rest or [lane_name])[0] or lane_name)),
                      tenant=request.tenant if int(created) else (str(tenant) or None))
            for (request, _), (jid, st, created, tenant, *rest) in zip(chunk, reply, strict=True)
        ]
        metrics.submitted(lane_name).inc(sum(p.created for p in published))
        return published
