"""What the operator commands do (submit, watch, stats, dead): async calls over one Redis client.

Every call covers every partition of the prefix (contract §10), on one Redis or a Redis Cluster alike.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any

from redis.asyncio import Redis

from streams import dead as dead_letters
from streams.config import StreamSettings
from streams.connection import BLOCK_MS, connect_detected
from streams.envelope import DeadLetter, JobResult
from streams.keys import Keys, partition_keys
from streams.partition_stats import partitioned_queue_stats
from streams.producer import Producer, Published
from streams.records import JobRecord, wait_for_terminal
from streams.window import DEFAULT_WINDOW

WATCH_BUFFER = 1000


class Ops:
    """One Redis client (single or cluster) and the keys, for the CLI's short-lived commands."""

    def __init__(self, settings: StreamSettings, redis: Redis) -> None:
        self.settings = settings
        self.keys = Keys(settings.prefix)
        self.partitions = settings.partitions
        self.redis = redis

    async def close(self) -> None:
        await self.redis.aclose()

    async def submit(self, agent: str, data: dict[str, Any], *, wait_s: float | None = None, **options: Any) -> tuple[Published, JobRecord | None]:
        producer = Producer(self.redis, self.keys, max_request_bytes=self.settings.max_request_bytes, partitions=self.partitions)
        published = await producer.publish(agent, data, **options)
        record = None
        if wait_s is not None:
            record = await wait_for_terminal(self.redis, self.keys, published.job_id, timeout_s=wait_s, partitions=self.partitions)
        return published, record

    async def watch(self, *, from_id: str = "$", count: int | None = None) -> AsyncIterator[JobResult]:
        """Follow every partition's results stream with XREAD BLOCK (no group: watching never steals results).

        One reader per partition (on a cluster they live on different shards) feeds one queue.
        """
        queue: asyncio.Queue[JobResult | BaseException] = asyncio.Queue(WATCH_BUFFER)
        readers = [asyncio.create_task(self._follow(k.results, from_id, queue)) for k in partition_keys(self.keys, self.partitions)]
        try:
            seen = 0
            while count is None or seen < count:
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                seen += 1
                yield item
        finally:
            for reader in readers:
                reader.cancel()
            for reader in readers:
                with suppress(asyncio.CancelledError):
                    await reader

    async def _follow(self, stream: str, from_id: str, queue: asyncio.Queue[JobResult | BaseException]) -> None:
        try:
            last = from_id
            if last == "$":  # pin "now" once, so results landing between two reads are not skipped
                newest = await self.redis.xrevrange(stream, count=1)
                last = newest[0][0] if newest else "0-0"
            while True:
                reply = await self.redis.xread({stream: last}, block=BLOCK_MS, count=100)
                for _, entries in reply or []:
                    for eid, fields in entries:
                        last = eid
                        await queue.put(JobResult.from_fields(fields))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - handed to the consumer of the queue, which raises it
            await queue.put(exc)

    async def stats(self, window: int = DEFAULT_WINDOW) -> dict[str, Any]:
        return await partitioned_queue_stats(self.redis, self.keys, self.partitions, window=window)

    async def dead_list(self, count: int) -> list[DeadLetter]:
        return await dead_letters.list_dead(self.redis, self.keys, count=count, partitions=self.partitions)

    async def dead_replay(self, entry_ids: list[str], replay_all: bool, *, reason: str | None = None) -> tuple[list[str], list[str]]:
        if replay_all:
            return await dead_letters.replay_all(self.redis, self.keys, reason=reason, partitions=self.partitions)
        replayed, skipped = [], []
        for eid in entry_ids:
            try:
                replayed.append(await dead_letters.replay(self.redis, self.keys, eid, partitions=self.partitions))
            except Exception as exc:  # noqa: BLE001 - reported per entry, the others still replay
                skipped.append(str(exc))
        return replayed, skipped

    async def dead_purge(self, *, reason: str | None = None) -> int:
        return await dead_letters.purge(self.redis, self.keys, reason=reason, partitions=self.partitions)


@asynccontextmanager
async def opened(settings: StreamSettings) -> AsyncIterator[Ops]:
    """:class:`Ops` on a client for ``settings``' Redis (a cluster client when the server is a cluster node), closed after."""
    ops = Ops(settings, await connect_detected(settings.effective_redis_url))
    try:
        yield ops
    finally:
        await ops.close()
