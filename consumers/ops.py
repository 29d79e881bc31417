"""What the operator commands do (submit, watch, stats, dead): async calls over one Redis client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from redis.asyncio import Redis

from streams import dead as dead_letters
from streams.config import StreamSettings
from streams.connection import connect
from streams.envelope import DeadLetter, JobResult
from streams.keys import Keys
from streams.producer import Producer, Published
from streams.records import JobRecord, wait_for_terminal
from streams.partition_stats import partitioned_queue_stats
from streams.window import DEFAULT_WINDOW


class Ops:
    """One Redis client and the keys, for the CLI's short-lived commands."""

    def __init__(self, settings: StreamSettings) -> None:
        self.settings = settings
        self.keys = Keys(settings.prefix)
        self.redis: Redis = connect(settings.effective_redis_url)

    async def close(self) -> None:
        await self.redis.aclose()

    async def submit(self, agent: str, data: dict[str, Any], *, wait_s: float | None = None, **options: Any) -> tuple[Published, JobRecord | None]:
        producer = Producer(self.redis, self.keys, max_request_bytes=self.settings.max_request_bytes, partitions=self.settings.partitions)
        published = await producer.publish(agent, data, **options)
        record = None
        if wait_s is not None:
            record = await wait_for_terminal(self.redis, self.keys, published.job_id, timeout_s=wait_s, partitions=self.settings.partitions)
        return published, record

    async def watch(self, *, from_id: str = "$", count: int | None = None) -> AsyncIterator[JobResult]:
        """Follow the results stream with XREAD BLOCK (no group: watching never steals results)."""
        last, seen = from_id, 0
        while count is None or seen < count:
            reply = await self.redis.xread({self.keys.results: last}, block=1000, count=100)
            for _, entries in reply or []:
                for eid, fields in entries:
                    last = eid
                    seen += 1
                    yield JobResult.from_fields(fields)
                    if count is not None and seen >= count:
                        return
            await asyncio.sleep(0)

    async def stats(self, window: int = DEFAULT_WINDOW) -> dict[str, Any]:
        return await partitioned_queue_stats(self.redis, self.keys, self.settings.partitions, window=window)

    async def dead_list(self, count: int) -> list[DeadLetter]:
        return await dead_letters.list_dead(self.redis, self.keys, count=count)

    async def dead_replay(self, entry_ids: list[str], replay_all: bool, *, reason: str | None = None) -> tuple[list[str], list[str]]:
        if replay_all:
            return await dead_letters.replay_all(self.redis, self.keys, reason=reason)
        replayed, skipped = [], []
        for eid in entry_ids:
            try:
                replayed.append(await dead_letters.replay(self.redis, self.keys, eid))
            except Exception as exc:  # noqa: BLE001 - reported per entry, the others still replay
                skipped.append(str(exc))
        return replayed, skipped

    async def dead_purge(self, *, reason: str | None = None) -> int:
        return await dead_letters.purge(self.redis, self.keys, reason=reason)
