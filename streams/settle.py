"""Batched settlement: results, records, dead letters, retries and acks in one EVALSHA per batch.

Jobs end at their own pace; the settler gathers every op queued while the
previous batch was in flight and writes them with one call of ``settle.lua``,
so the cost of a round trip is shared by the whole batch. While the pool is
full, ops finished one at a time are held back briefly (:mod:`streams.hold`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from streams import metrics
from streams.batch import BatchWriter, PartlyWritten, log_refusal
from streams.entries import Release
from streams.envelope import flat
from streams.hold import HeldBack
from streams.keys import Keys
from streams.outage import REDIS_DOWN
from streams.replicated import Rerouted, Shortfalls, call_and_wait
from streams.scripts import Scripts
from streams.slow_slots import SlotSlow, slot_of, slow_slots_of

log = logging.getLogger(__name__)

# A settle batch waits at most this long for its replicas; fewer acknowledgements are logged (once a spell), not fatal.
WAIT_TIMEOUT_MS = 1000
# The ops JSON one settle.lua call carries at most (but one op): about what one call may do for workflows
# (workflow.lua: WF_CALL_WORK), and a batch of large results no longer goes as one call of tens of MB.
CALL_OPS_BYTES = 4 * 1_048_576


@dataclass(slots=True)
class SettleOp:
    """One entry's settlement; ``op`` is its element of ``settle.lua``'s JSON op list (all strings)."""

    stream: str
    entry_id: str
    op: list[Any]
    on_written: Callable[[bool], None] | None = None


def drop_op(stream: str, entry_id: str) -> SettleOp:
    return SettleOp(stream, entry_id, ["drop", stream, entry_id])


def done_op(
    stream: str, entry_id: str, source: str, job_id: str, result: dict[str, str], dead: dict[str, str] | None,
    *, alt: str = "", parent: str | None = None, step: str | None = None, keep_usage: bool = False, cap: list[str] | None = None,
) -> SettleOp:
    """``cap`` (streams.tenant_cap): the job's tenant is capped; its ending frees the slot."""
    op = ["done", stream, entry_id, source, job_id, flat(result), flat(dead) if dead else [], alt, parent if parent and step else "", step if parent and step else "",
          "1" if keep_usage else ""]
    return SettleOp(stream, entry_id, op + [cap] if cap else op)


def retry_op(stream: str, entry_id: str, source: str, job_id: str, delay_ms: int, member: str, error: str, usage: str = "",
             cap: list[str] | None = None) -> SettleOp:
    """Due ``delay_ms`` from when it is written, by Redis' clock (settle.lua): workers' clocks may differ."""
    op: list[Any] = ["retry", stream, entry_id, source, job_id, str(max(0, delay_ms)), member, error, usage]
    return SettleOp(stream, entry_id, op + [cap] if cap else op)


def handback_op(stream: str, entry_id: str, source: str, job_id: str, fields: dict[str, str], usage: str = "", *, worker: str,
                cap: list[str] | None = None) -> SettleOp:
    """Written only while ``worker`` still holds the entry and the job: not once another consumer took it over."""
    op: list[Any] = ["handback", stream, entry_id, source, job_id, flat(fields), usage, worker]
    return SettleOp(stream, entry_id, op + [cap] if cap else op)


def _wrote(reply: Any) -> bool:
    """1 or 0; ``[1, status, duration_ms]`` when the op was a step that ended its workflow."""
    if isinstance(reply, list):
        metrics.workflow_fanned_in(str(reply[1]), int(reply[2]))
        return True
    return bool(int(reply))


class Settler:
    """Queues settle ops and writes them with ``settle.lua`` in batches; ``release`` frees the runtime's slot."""

    def __init__(
        self, redis: Redis, keys: Keys | Sequence[Keys], *, group: str, max_result_bytes: int, job_ttl_s: int,
        release: Release, replica_acks: int = 0, hold: Callable[[int], bool] | None = None, hold_s: float = 0.0,
    ) -> None:
        """``hold``, ``hold_s``: finished ops wait as :mod:`streams.hold` says, so one call settles several."""
        self._redis = redis
        self._replica_acks = replica_acks
        self._shortfalls = Shortfalls("settle batches", WAIT_TIMEOUT_MS)
        self._scripts = Scripts(redis)
        # One call of settle.lua per partition in a batch: its keys share the partition's hash slot.
        partitions = [keys] if isinstance(keys, Keys) else list(keys)
        self._partition_of = {stream: i for i, k in enumerate(partitions) for stream in k.work_streams}
        self._heads: list[list[str | int]] = [
            [k.job_prefix, group, max_result_bytes, job_ttl_s, k.lane_prefix] for k in partitions]
        self._script_keys = [[k.results, k.dead, k.delayed, k.slot_guard] for k in partitions]
        self._numbers = [k.partition or 0 for k in partitions]  # what the log calls them (a worker may serve some only)
        # several partitions on a cluster: a batch's partition whose master hangs waits, the others are written
        self._slow = slow_slots_of(redis) if len(partitions) > 1 else None
        self._slots = [slot_of(k.results) for k in partitions]
        self._release = release
        self._writer: BatchWriter[SettleOp] = BatchWriter("settle", self._write, self._done)
        self._held: HeldBack[SettleOp] = HeldBack(self._writer.submit, hold=hold, hold_s=hold_s)
        self.submit = self._held.submit
        self.run = self._writer.run

    @property
    def pending(self) -> int:
        return self._held.held + self._writer.pending

    async def flush(self) -> None:
        """Write everything submitted so far, held ops included."""
        self._held.let_go()
        await self._writer.flush()

    async def close(self, task: asyncio.Task[None]) -> None:
        """Write what is submitted, then end ``task`` (the one running :meth:`run`)."""
        self._held.let_go()
        await self._writer.close(task)

    async def _write(self, batch: list[SettleOp]) -> list[bool]:
        if len(self._heads) == 1:
            return await self._write_partition(0, batch)
        by_partition: dict[int, list[int]] = {}
        for i, op in enumerate(batch):
            by_partition.setdefault(self._partition_of[op.stream], []).append(i)
        wrote: list[bool | None] = [False] * len(batch)
        outage: BaseException | None = None
        slow: SlotSlow | None = None
        for p, indexes in by_partition.items():
            try:
                written = await self._write_partition(p, [batch[i] for i in indexes])
            except SlotSlow as exc:  # its master hangs: these ops wait for it (written again: settle.lua answers a copy)
                slow = slow or exc
                for i in indexes:
                    wrote[i] = None
                continue
            except REDIS_DOWN as exc:  # this partition's master is away: the others' ops are written all the same
                outage = outage or exc
                for i in indexes:
                    wrote[i] = None
                continue
            except ResponseError as exc:  # refused here (its group gone with an emptied master?): the others still go
                log_refusal(f"settle (partition {self._numbers[p]})", len(indexes), exc)
                continue
            for i, one in zip(indexes, written, strict=True):
                wrote[i] = one
        if outage is not None:
            if all(one is None for one in wrote):
                raise outage
            raise PartlyWritten(wrote, outage)
        if slow is not None:
            raise PartlyWritten(wrote, slow)
        return [bool(one) for one in wrote]

    async def _write_partition(self, p: int, batch: list[SettleOp]) -> list[bool]:
        """One call of settle.lua, or more: a call answers the ops up to the one after which it did its share of
        workflow work (workflow.lua: WF_CALL_WORK), and the rest go in the next (a copy of the call after an outage
        answers the ops it wrote as written). So that a call sends little it does not look at (resending the whole
        rest each time cost quadratically: 30 ops of ~1 MB results, 240 MB sent), a call carries at most
        ``CALL_OPS_BYTES`` of ops (but one op), and after a call that stopped early, twice the ops it did."""
        encoded = [orjson.dumps(op.op) for op in batch]
        wrote: list[bool] = []
        most = len(batch)
        while len(wrote) < len(batch):
            start = end = len(wrote)
            size = 0
            while end < len(batch) and end - start < most and (end == start or size + len(encoded[end]) <= CALL_OPS_BYTES):
                size += len(encoded[end]) + 1
                end += 1
            ops = (b"[" + b",".join(encoded[start:end]) + b"]").decode()
            reply = await self._call_slow_aware(p, [*self._heads[p], ops])
            if not reply:  # each call settles one op at least: not settle.lua's answer
                raise ResponseError(f"settle: no answer for {end - start} ops")
            wrote += [_wrote(x) for x in reply]
            most = 2 * len(reply) if len(reply) < end - start else 2 * most
        return wrote

    async def _call_slow_aware(self, p: int, args: list[Any]) -> Any:
        """One call, not sent while the partition's slot is slow; one that goes unanswered past its time ends in the
        background (each call is timed alone: a batch in several calls is no slow master)."""
        if self._slow is None:
            return await self._call(p, args)
        # under STREAMCREW_REPLICA_ACKS a healthy master may wait WAIT_TIMEOUT_MS for its replicas, twice when it had to
        # load the script first (the settle and its WAIT are sent again): not slow for that
        after_s = self._slow.after_s + (2 * WAIT_TIMEOUT_MS / 1000 if self._replica_acks else 0.0)
        return await self._slow.unless_slow(self._slots[p], lambda: self._call(p, args), after_s=after_s)

    async def _call(self, p: int, args: list[Any]) -> Any:
        keys = self._script_keys[p]
        if not self._replica_acks:
            return await self._scripts.settle(keys=keys, args=args)
        return await self._write_replicated(p, keys, args)

    async def _write_replicated(self, p: int, keys: list[str], args: list[Any]) -> Any:
        """The settle and a WAIT for ``replica_acks`` replicas of its master, on one connection (a failover then keeps it)."""
        try:
            reply, acked = await call_and_wait(self._redis, self._scripts.settle, keys, args, self._replica_acks, WAIT_TIMEOUT_MS)
        except Rerouted as exc:
            # The master moved or is unreachable: the client's own routing finds the new one (a fresh master, no replica
            # yet). Said once written: while no node answers, every retry of the batch would say it again.
            reply = await self._scripts.settle(keys=keys, args=args)
            log.warning("settle batch of partition %d written through the cluster's rerouting without waiting for replicas (%s)",
                        self._numbers[p], exc)
            return reply
        self._shortfalls.count(self._numbers[p], acked, self._replica_acks)
        return reply

    def _done(self, op: SettleOp, wrote: bool) -> None:
        self._release(op.stream, op.entry_id, settled=wrote)  # not written: pending, left to the lease
        if op.on_written is not None:
            op.on_written(wrote)
