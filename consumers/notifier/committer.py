"""Batched commits, one writer per partition: every entry settled while the previous batch was in flight goes in one EVALSHA.

Each partition has its own :class:`~streams.batch.BatchWriter`, so a commit
script only ever names keys of one hash slot (contract §10), and a partition
whose Redis master is failing over holds back only its own commits.

When an endpoint is the bottleneck, its deliveries end one at a time; written
at once, each would cost a commit and (its slot freed) a read of its own.
Settled entries are held back as :mod:`streams.hold` says; a crash meanwhile
only re-sends them (same ``webhook-id``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Sequence

from consumers.notifier.store import CommitOp, Store
from streams.batch import BatchWriter
from streams.entries import Release
from streams.hold import HeldBack

log = logging.getLogger(__name__)

COMMIT_CHUNK = 500

Written = Callable[[bool], None]
Item = tuple[CommitOp, Written | None]


class Committer:
    """Queues :class:`CommitOp` s on their partition's writer, then frees each entry's runtime slot."""

    def __init__(self, stores: Sequence[Store], *, group: str, consumer: str, release: Release,
                 hold: Callable[[int], bool] | None = None, hold_s: float = 0.0) -> None:
        self.group = group
        self.consumer = consumer
        self._release = release
        self._held: HeldBack[Item] = HeldBack(lambda item: self._route[item[0].stream].submit(item), hold=hold, hold_s=hold_s)
        self._writers: list[BatchWriter[Item]] = []
        self._route: dict[str, BatchWriter[Item]] = {}
        for store in stores:
            writer: BatchWriter[Item] = BatchWriter(f"notifier commit {store.keys.prefix}", functools.partial(self._write, store),
                                                    self._done, chunk=COMMIT_CHUNK)
            self._writers.append(writer)
            self._route[store.due] = self._route[store.keys.results] = writer
        self._tasks: list[asyncio.Task[None]] = []

    def submit(self, op: CommitOp, on_written: Written | None = None) -> None:
        self._held.submit((op, on_written))

    async def run(self) -> None:
        self._tasks = [asyncio.create_task(writer.run()) for writer in self._writers]
        await asyncio.gather(*self._tasks)

    async def flush(self) -> None:
        """Wait until everything queued so far is written, in every partition."""
        self._held.let_go()
        await asyncio.gather(*(writer.flush() for writer in self._writers))

    async def close(self, task: asyncio.Task[None]) -> None:
        """Write what is queued in every partition, then end ``task`` (the one running :meth:`run`)."""
        self._held.let_go()
        for writer, writing in zip(self._writers, self._tasks, strict=True):
            await writer.close(writing)
        await task

    async def _write(self, store: Store, batch: list[Item]) -> list[bool]:
        return [bool(w) for w in await store.commit([op for op, _ in batch], group=self.group, consumer=self.consumer)]

    def _done(self, item: Item, wrote: bool) -> None:
        op, on_written = item
        self._release(op.stream, op.entry_id, settled=wrote)  # not written: pending, left to the lease
        if on_written is not None:
            on_written(wrote)
