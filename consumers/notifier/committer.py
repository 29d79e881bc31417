"""Batched commits: every entry settled while the previous batch was in flight goes in one EVALSHA."""

from __future__ import annotations

import logging
from collections.abc import Callable

from consumers.notifier.store import CommitOp, Store
from streams.batch import BatchWriter

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
        self._writer: BatchWriter[tuple[CommitOp, Written | None]] = BatchWriter("notifier commit", self._write, self._done, chunk=COMMIT_CHUNK)
        self.run = self._writer.run
        self.flush = self._writer.flush
        self.close = self._writer.close

    def submit(self, op: CommitOp, on_written: Written | None = None) -> None:
        self._writer.submit((op, on_written))

    async def _write(self, batch: list[tuple[CommitOp, Written | None]]) -> list[bool]:
        return [bool(w) for w in await self.store.commit([op for op, _ in batch], group=self.group, consumer=self.consumer)]

    def _done(self, item: tuple[CommitOp, Written | None], wrote: bool) -> None:
        op, on_written = item
        self._release(op.stream, op.entry_id)
        if on_written is not None:
            on_written(wrote)
