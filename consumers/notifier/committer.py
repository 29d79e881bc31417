"""Batched commits: every entry settled while the previous batch was in flight goes in one EVALSHA."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from redis.exceptions import ResponseError

from consumers.notifier.store import CommitOp, Store
from streams.runtime import REDIS_DOWN, Backoff

log = logging.getLogger(__name__)

COMMIT_CHUNK = 500

Written = Callable[[bool], None]


class Committer:
    """Queues :class:`CommitOp` s, writes them in batches, then frees each entry's runtime slot."""

    def __init__(self, store: Store, *, group: str, consumer: str, release: Callable[[str, str], None]) -> None:
        self.store = store
        self.group = group
        self.consumer = consumer
        self._release = release
        self._queue: list[tuple[CommitOp, Written | None]] = []
        self._wakeup = asyncio.Event()
        self._flushed = asyncio.Event()
        self._closing = False
        self._writing = False

    def submit(self, op: CommitOp, on_written: Written | None = None) -> None:
        self._queue.append((op, on_written))
        self._wakeup.set()

    async def run(self) -> None:
        backoff = Backoff("notifier commit")
        while True:
            if not self._queue:
                self._flushed.set()
                if self._closing:
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            self._flushed.clear()
            batch, self._queue = self._queue[:COMMIT_CHUNK], self._queue[COMMIT_CHUNK:]
            self._writing = True
            try:
                written = await self.store.commit([op for op, _ in batch], group=self.group, consumer=self.consumer)
            except REDIS_DOWN as exc:
                self._queue[:0] = batch  # kept in order until Redis answers again
                await backoff.failed(exc)
                continue
            except ResponseError:
                # Not expected; the entries stay pending and are reclaimed after the lease, so nothing is lost.
                log.exception("notifier: Redis refused a commit of %d entries; they will be reclaimed", len(batch))
                written = [False] * len(batch)
            finally:
                self._writing = False
            backoff.ok()
            for (op, on_written), wrote in zip(batch, written, strict=True):
                self._release(op.stream, op.entry_id)
                if on_written is not None:
                    on_written(wrote)

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
