"""Batched settlement: results, records, dead letters, retries and acks in one EVALSHA per batch.

Jobs end at their own pace; the settler gathers every op queued while the
previous batch was in flight and writes them with one call of ``settle.lua``,
so the cost of a round trip is shared by the whole batch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from redis.asyncio import Redis

from streams.envelope import flat
from streams.keys import Keys
from streams.runtime import REDIS_DOWN, Backoff
from streams.scripts import Scripts

log = logging.getLogger(__name__)

SETTLE_CHUNK = 500


@dataclass(slots=True)
class SettleOp:
    """One entry's settlement; ``op`` is its element of ``settle.lua``'s JSON op list (all strings)."""

    stream: str
    entry_id: str
    op: list[Any]
    on_written: Callable[[bool], None] | None = None


def drop_op(stream: str, entry_id: str) -> SettleOp:
    return SettleOp(stream, entry_id, ["drop", stream, entry_id])


def done_op(stream: str, entry_id: str, source: str, job_id: str, result: dict[str, str], dead: dict[str, str] | None) -> SettleOp:
    return SettleOp(stream, entry_id, ["done", stream, entry_id, source, job_id, flat(result), flat(dead) if dead else []])


def retry_op(stream: str, entry_id: str, source: str, job_id: str, due_ms: int, member: str, error: str) -> SettleOp:
    return SettleOp(stream, entry_id, ["retry", stream, entry_id, source, job_id, str(due_ms), member, error])


def handback_op(stream: str, entry_id: str, source: str, job_id: str, fields: dict[str, str]) -> SettleOp:
    return SettleOp(stream, entry_id, ["handback", stream, entry_id, source, job_id, flat(fields)])


class Settler:
    """Queues settle ops and flushes them in batches; ``release`` frees the runtime's slot."""

    def __init__(self, redis: Redis, keys: Keys, *, group: str, results_maxlen: int, job_ttl_s: int, release: Callable[[str, str], None]) -> None:
        self.redis = redis
        self.keys = keys
        self._scripts = Scripts(redis)
        self._head: list[str | int] = [keys.job_prefix, group, results_maxlen, job_ttl_s, f"{keys.prefix}:requests:"]
        self._script_keys = [keys.results, keys.dead, keys.delayed]
        self._release = release
        self._queue: list[SettleOp] = []
        self._wakeup = asyncio.Event()
        self._flushed = asyncio.Event()
        self._closing = False
        self._writing = False

    def submit(self, op: SettleOp) -> None:
        self._queue.append(op)
        self._wakeup.set()

    @property
    def pending(self) -> int:
        return len(self._queue)

    async def run(self) -> None:
        backoff = Backoff("settle")
        while True:
            if not self._queue:
                self._flushed.set()
                if self._closing:
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            self._flushed.clear()
            batch, self._queue = self._queue[:SETTLE_CHUNK], self._queue[SETTLE_CHUNK:]
            self._writing = True
            try:
                written = await self._write(batch)
            except REDIS_DOWN as exc:
                self._queue[:0] = batch  # nothing is lost: retried in order once Redis answers
                await backoff.failed(exc)
                continue
            finally:
                self._writing = False
            backoff.ok()
            for op, wrote in zip(batch, written, strict=True):
                self._release(op.stream, op.entry_id)
                if op.on_written is not None:
                    op.on_written(bool(wrote))

    async def _write(self, batch: list[SettleOp]) -> list[int]:
        ops = orjson.dumps([op.op for op in batch]).decode()
        reply = await self._scripts.settle(keys=self._script_keys, args=[*self._head, ops])
        return [int(x) for x in reply]

    async def flush(self) -> None:
        """Wait until everything queued so far is written."""
        while self._queue or self._writing:
            self._flushed.clear()
            self._wakeup.set()
            await self._flushed.wait()

    async def close(self, task: asyncio.Task[None]) -> None:
        self._closing = True
        self._wakeup.set()
        await task
