"""Batched writes: everything queued while the previous batch was in flight goes in one call.

The worker's settlements and the notifier's commits both end work at their own
pace and write it with one Lua call per batch, so a round trip is shared by the
whole batch. On a Redis outage the batch is kept, in order, and written once
Redis answers; a refused batch (a script error) is reported as not written.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from redis.exceptions import ResponseError

from streams.groups import is_nogroup
from streams.outage import REDIS_DOWN, Backoff
from streams.slow_slots import SlotSlow

log = logging.getLogger(__name__)

T = TypeVar("T")
CHUNK = 500
SLOW_RETRY_S = 0.1  # items waiting for a slow master (streams.slow_slots), nothing else to write: looked at again after this


class PartlyWritten(Exception):
    """A write whose batch went in several calls (a settle batch's partitions), some of which met an outage:
    ``written`` says per item whether it wrote, or None where its call failed (written again after the backoff)."""

    def __init__(self, written: list[bool | None], cause: BaseException) -> None:
        super().__init__(f"{written.count(None)} of {len(written)} not written: {cause}")
        self.written = written
        self.cause = cause


def log_refusal(name: str, count: int, exc: ResponseError) -> None:
    """Say why Redis refused a batch of ``count`` (called in its ``except``: an unexpected refusal logs the traceback)."""
    if is_nogroup(exc):  # a Redis restarted empty: the entries went with the group; the read loop makes it again
        log.warning("%s: a batch of %d not written: its consumer group is gone (Redis restarted empty?)", name, count)
    else:  # not expected: the entries stay pending and are reclaimed after the lease, so nothing is lost
        log.exception("%s: Redis refused a batch of %d; its entries will be reclaimed", name, count)


class BatchWriter(Generic[T]):
    """Queues items; ``write`` stores a batch and says per item whether it wrote; ``done`` follows each."""

    def __init__(self, name: str, write: Callable[[list[T]], Awaitable[list[bool]]], done: Callable[[T, bool], None], *, chunk: int = CHUNK) -> None:
        self.name = name
        self._write = write
        self._done = done
        self._chunk = chunk
        self._queue: list[T] = []
        self._wakeup = asyncio.Event()
        self._flushed = asyncio.Event()
        self._closing = False
        self._writing = False

    def submit(self, item: T) -> None:
        self._queue.append(item)
        self._wakeup.set()

    @property
    def pending(self) -> int:
        return len(self._queue)

    async def run(self) -> None:
        backoff = Backoff(self.name)
        while True:
            if not self._queue:
                self._flushed.set()
                if self._closing:
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            self._flushed.clear()
            batch, self._queue = self._queue[: self._chunk], self._queue[self._chunk :]
            self._writing = True
            try:
                with backoff.trying():
                    written = await self._write(batch)
            except asyncio.CancelledError:
                self._queue[:0] = batch  # kept for whoever flushes next (a close writes what is queued)
                raise
            except REDIS_DOWN as exc:
                self._queue[:0] = batch  # nothing is lost: retried in order once Redis answers
                await backoff.failed(exc)
                continue
            except PartlyWritten as partly:  # what was written is done; only the rest goes again
                for item, wrote in zip(batch, partly.written, strict=True):
                    if wrote is not None:
                        self._done(item, wrote)
                rest = [item for item, wrote in zip(batch, partly.written, strict=True) if wrote is None]
                if isinstance(partly.cause, SlotSlow):  # a master hangs: its items wait behind the others, no backoff
                    self._queue.extend(rest)
                    if len(rest) == len(batch) and len(self._queue) == len(rest):
                        await asyncio.sleep(SLOW_RETRY_S)
                    continue
                self._queue[:0] = rest
                await backoff.failed(partly.cause)
                continue
            except ResponseError as exc:
                log_refusal(self.name, len(batch), exc)
                written = [False] * len(batch)
            except Exception:  # a bug or a library's surprise: reported as not written, and the writer goes on
                log.exception("%s: a batch of %d failed; its entries will be reclaimed", self.name, len(batch))
                written = [False] * len(batch)
            finally:
                self._writing = False
            backoff.ok()
            for item, wrote in zip(batch, written, strict=True):
                self._done(item, wrote)

    async def flush(self) -> None:
        """Wait until everything queued so far is written."""
        while self._queue or self._writing:
            self._flushed.clear()
            self._wakeup.set()
            await self._flushed.wait()

    async def close(self, task: asyncio.Task[None]) -> None:
        """Write what is queued, then end ``task`` (the one running :meth:`run`)."""
        self._closing = True
        self._wakeup.set()
        await task
