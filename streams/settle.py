"""Batched settlement: results, records, dead letters, retries and acks in one EVALSHA per batch.

Jobs end at their own pace; the settler gathers every op queued while the
previous batch was in flight and writes them with one call of ``settle.lua``,
so the cost of a round trip is shared by the whole batch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from streams import metrics
from streams.batch import BatchWriter
from streams.envelope import flat
from streams.keys import Keys
from streams.scripts import Scripts

log = logging.getLogger(__name__)

# A settle batch waits at most this long for its replicas; fewer acknowledgements are logged, not fatal.
WAIT_TIMEOUT_MS = 1000


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
    *, alt: str = "", parent: str | None = None, step: str | None = None,
) -> SettleOp:
    op = ["done", stream, entry_id, source, job_id, flat(result), flat(dead) if dead else [], alt]
    if parent and step:  # a workflow step: settle.lua runs the fan-in in the same call
        op += [parent, step]
    return SettleOp(stream, entry_id, op)


def retry_op(stream: str, entry_id: str, source: str, job_id: str, due_ms: int, member: str, error: str) -> SettleOp:
    return SettleOp(stream, entry_id, ["retry", stream, entry_id, source, job_id, str(due_ms), member, error])


def handback_op(stream: str, entry_id: str, source: str, job_id: str, fields: dict[str, str]) -> SettleOp:
    return SettleOp(stream, entry_id, ["handback", stream, entry_id, source, job_id, flat(fields)])


def _wrote(reply: Any) -> bool:
    """1 or 0; ``[1, status, duration_ms]`` when the op was a step that ended its workflow."""
    if isinstance(reply, list):
        metrics.workflow_ended(str(reply[1]), int(reply[2]))
        return True
    return bool(int(reply))


class Settler:
    """Queues settle ops and writes them with ``settle.lua`` in batches; ``release`` frees the runtime's slot."""

    def __init__(
        self, redis: Redis, keys: Keys | Sequence[Keys], *, group: str, results_maxlen: int, job_ttl_s: int,
        release: Callable[[str, str], None], replica_acks: int = 0,
    ) -> None:
        self._redis = redis
        self._replica_acks = replica_acks
        self._scripts = Scripts(redis)
        # One call of settle.lua per partition in a batch: its keys share the partition's hash slot.
        partitions = [keys] if isinstance(keys, Keys) else list(keys)
        self._partition_of = {lane: i for i, k in enumerate(partitions) for lane in k.lanes}
        self._heads: list[list[str | int]] = [
            [k.job_prefix, group, results_maxlen, job_ttl_s, f"{k.prefix}:requests:"] for k in partitions]
        self._script_keys = [[k.results, k.dead, k.delayed] for k in partitions]
        self._release = release
        self._writer: BatchWriter[SettleOp] = BatchWriter("settle", self._write, self._done)
        self.submit = self._writer.submit
        self.run = self._writer.run
        self.flush = self._writer.flush
        self.close = self._writer.close

    @property
    def pending(self) -> int:
        return self._writer.pending

    async def _write(self, batch: list[SettleOp]) -> list[bool]:
        if len(self._heads) == 1:
            return await self._write_partition(0, batch)
        by_partition: dict[int, list[int]] = {}
        for i, op in enumerate(batch):
            by_partition.setdefault(self._partition_of[op.stream], []).append(i)
        wrote = [False] * len(batch)
        for p, indexes in by_partition.items():
            for i, one in zip(indexes, await self._write_partition(p, [batch[i] for i in indexes]), strict=True):
                wrote[i] = one
        return wrote

    async def _write_partition(self, p: int, batch: list[SettleOp]) -> list[bool]:
        ops = orjson.dumps([op.op for op in batch]).decode()
        reply = await self._scripts.settle(keys=self._script_keys[p], args=[*self._heads[p], ops])
        if self._replica_acks:
            await self._wait_replicas(self._script_keys[p][0])
        return [_wrote(x) for x in reply]

    async def _wait_replicas(self, key: str) -> None:
        """WAIT until ``replica_acks`` replicas of ``key``'s master hold the batch (a failover then keeps it)."""
        if isinstance(self._redis, RedisCluster):
            node = self._redis.get_node_from_key(key)
            acked = await self._redis.execute_command("WAIT", self._replica_acks, WAIT_TIMEOUT_MS, target_nodes=node)
        else:
            acked = await self._redis.wait(self._replica_acks, WAIT_TIMEOUT_MS)
        if int(acked) < self._replica_acks:
            log.warning("settle batch acknowledged by %s of %d replicas within %d ms", acked, self._replica_acks, WAIT_TIMEOUT_MS)

    def _done(self, op: SettleOp, wrote: bool) -> None:
        self._release(op.stream, op.entry_id)
        if op.on_written is not None:
            op.on_written(wrote)
