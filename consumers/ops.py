"""What the operator commands do (submit, job, watch, stats, dead): async calls over one Redis client.

Every call covers every partition of the prefix (contract §10; `stats --partitions` some), on one Redis or a Redis Cluster alike.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

from redis.asyncio import Redis

from streams import dead as dead_letters
from streams.config import StreamSettings
from streams.dead import Replay
from streams.connection import connect_detected
from streams.envelope import DeadLetter, JobResult
from streams.errors import DecodeError
from streams.keys import Keys, partition_keys
from streams.layout import check_layout
from streams.outage import REDIS_DOWN
from streams.partition_stats import partitioned_queue_stats
from streams.producer import Producer, Published
from streams.records import JobRecord, get_job, wait_for_terminal
from streams.sizes import short
from streams.window import DEFAULT_WINDOW

log = logging.getLogger("streamcrew.cli")

WATCH_BLOCK_MS = 200  # how long a round waits for a result when the last one found none


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
        if wait_s is not None and published.status != "conflict":  # nothing queued: no id to wait on
            record = await wait_for_terminal(self.redis, self.keys, published.job_id, timeout_s=wait_s, partitions=self.partitions)
        return published, record

    async def job(self, job_id: str) -> JobRecord | None:
        """The job's status record, found by its id alone in whichever partition holds it."""
        return await get_job(self.redis, self.keys, job_id, partitions=self.partitions)

    async def watch(self, *, from_id: str = "$", count: int | None = None) -> AsyncIterator[JobResult]:
        """Follow every partition's results stream with XREAD (no group: watching never steals results).

        Each round reads every partition at once (on a cluster they live on different shards); it blocks,
        briefly, only when the previous round found nothing. No read is left in flight between rounds, so
        stopping never has to cancel one.
        """
        streams = [k.results for k in partition_keys(self.keys, self.partitions)]
        last = [await self._start_id(stream, from_id) for stream in streams]
        block: int | None = WATCH_BLOCK_MS
        seen = 0
        while count is None or seen < count:
            replies = await asyncio.gather(*(self.redis.xread({s: last[i]}, block=block, count=100) for i, s in enumerate(streams)))
            block = WATCH_BLOCK_MS
            for i, reply in enumerate(replies):
                for _, entries in cast(list[tuple[str, list[tuple[str, dict[str, str]]]]], reply or []):
                    for eid, fields in entries:
                        last[i], block = eid, None
                        try:
                            result = JobResult.from_fields(fields)
                        except DecodeError as exc:  # a hand-made entry: said, and passed by (it stopped every follower)
                            log.warning("result entry %s of %s is not a result event (%s); skipped", eid, streams[i], short(exc.reason))
                            continue  # not counted: --count N waits for N results
                        seen += 1
                        yield result
                        if count is not None and seen >= count:
                            return

    async def _start_id(self, stream: str, from_id: str) -> str:
        """``$`` pinned once to the stream's newest entry, so results landing between two rounds are not skipped."""
        if from_id != "$":
            return from_id
        newest = await self.redis.xrevrange(stream, count=1)
        return str(newest[0][0]) if newest else "0-0"

    async def stats(self, window: int = DEFAULT_WINDOW, *, only: tuple[int, ...] | None = None) -> dict[str, Any]:
        """Every partition's figures, or those of ``only`` (``stats --partitions``)."""
        return await partitioned_queue_stats(self.redis, self.keys, self.partitions, window=window, only=only)

    async def dead_list(self, count: int) -> list[DeadLetter]:
        return await dead_letters.list_dead(self.redis, self.keys, count=count, partitions=self.partitions)

    async def dead_replay(self, entry_ids: list[str], replay_all: bool, *, reason: str | None = None) -> Replay:
        """Replay the named dead letters (or all present now); an outage ends it, keeping what went back."""
        if replay_all:
            return await dead_letters.gather(dead_letters.replay_each(self.redis, self.keys, reason=reason, partitions=self.partitions))
        return await dead_letters.gather(self._replay_named(entry_ids), entry_ids)

    async def _replay_named(self, entry_ids: list[str]) -> AsyncIterator[tuple[str | None, str]]:
        for entry in entry_ids:
            try:
                job_id = (await dead_letters.replay(self.redis, self.keys, entry, partitions=self.partitions)).job_id
            except REDIS_DOWN:
                raise
            except Exception as exc:  # noqa: BLE001 - reported per entry, the others still replay
                yield None, str(exc)
            else:
                yield job_id, ""

    async def dead_purge(self, *, reason: str | None = None) -> int:
        return await dead_letters.purge(self.redis, self.keys, reason=reason, partitions=self.partitions)


@asynccontextmanager
async def open_ops(settings: StreamSettings) -> AsyncIterator[Ops]:
    """:class:`Ops` on a client for ``settings``' Redis (a cluster client when the server is a cluster node), closed after."""
    ops = Ops(settings, await connect_detected(settings.effective_redis_url, one_shot=True))
    try:
        await check_layout(ops.redis, ops.keys, ops.partitions)  # another N would look for jobs where they are not
        yield ops
    finally:
        await ops.close()
