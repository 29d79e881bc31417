"""Higher-priority streams a read found empty, watched instead of read again before every read below them.

Strict priority reads every stream of a higher level before one of a lower: with N partitions, a worker
whose work is in the normal lanes read N empty high lanes before each read of a normal one, a round trip
each (bench/README.md, "The empty higher lanes, watched instead of read"). Once a read below them gave entries, those higher
streams are *watched*: per hash slot, one ``XREAD BLOCK`` (which claims nothing) from each stream's
group's last-delivered ID, so it returns as soon as any entry the group has not been given is there. While
it waits, its streams are *quiet* and the reads skip them; once it returns (an entry, an error, or its
``block_ms`` over) they are read again, and watched again if still empty. A watch that fails therefore
costs one block period of reads at most, never a starved stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

log = logging.getLogger(__name__)

WATCH_BLOCK_MS = 2000  # a watch's life: its streams are read again after it (under the client's socket timeout)


def slot_of_for(redis: Any) -> Callable[[str], int]:
    """A stream's hash slot on Redis Cluster, where one XREADGROUP or XREAD may name keys of one slot only; else 0."""
    return (lambda s: key_slot(s.encode())) if isinstance(redis, RedisCluster) else (lambda s: 0)


def by_slot(streams: Sequence[str], slot_of: Callable[[str], int]) -> dict[int, list[str]]:
    """``streams`` grouped by hash slot, each group in the given order."""
    groups: dict[int, list[str]] = {}
    for stream in streams:
        groups.setdefault(slot_of(stream), []).append(stream)
    return groups


class QuietStreams:
    """Watches of higher streams, one per hash slot; ``quiet(stream)`` says whether the reads may skip it."""

    def __init__(self, redis: Any, group: str, slot_of: Callable[[str], int], *, block_ms: int = WATCH_BLOCK_MS) -> None:
        self._redis = redis
        self._group = group
        self._slot_of: Callable[[str], int] = functools.cache(slot_of)  # the same few streams, watched on every read
        self._block_ms = block_ms
        self._watches: dict[int, tuple[frozenset[str], asyncio.Task[None]]] = {}
        self._quiet: set[str] = set()

    def quiet(self, stream: str) -> bool:
        return stream in self._quiet

    def watch(self, streams: list[str]) -> None:
        """Watch exactly ``streams`` (each just read empty, or quiet): a slot's watch is kept while its set is the same."""
        groups = by_slot(streams, self._slot_of)
        for slot in [s for s in self._watches if s not in groups]:
            self._end(slot)
        for slot, members in groups.items():
            wanted = frozenset(members)
            current = self._watches.get(slot)
            if current is not None and current[0] == wanted and not current[1].done():
                continue
            if current is not None:
                self._end(slot)
            self._quiet |= wanted
            self._watches[slot] = (wanted, asyncio.create_task(self._watch(slot, wanted)))

    def stop(self) -> None:
        """End every watch: all streams are read again (an idle reader blocks on all of them itself)."""
        for slot in list(self._watches):
            self._end(slot)

    async def close(self) -> None:
        """End every watch and wait for the cancelled tasks."""
        tasks = [task for _, task in self._watches.values()]
        self.stop()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _end(self, slot: int) -> None:
        streams, task = self._watches.pop(slot)
        task.cancel()  # an XREAD claims nothing: cutting it off loses nothing
        self._quiet -= streams

    async def _watch(self, slot: int, streams: frozenset[str]) -> None:
        try:
            ids = {stream: await self._last_delivered(stream) for stream in sorted(streams)}
            await self._redis.xread(ids, count=1, block=self._block_ms)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure only ends the watch: the streams are read again
            log.debug("%s: watch of %s ended: %s", self._group, sorted(streams), exc)
        finally:
            current = self._watches.get(slot)
            if current is not None and current[1] is asyncio.current_task():
                del self._watches[slot]
                self._quiet -= streams

    async def _last_delivered(self, stream: str) -> str:
        """The group's last-delivered ID: entries after it are the ones a ``>`` read would give."""
        for info in await self._redis.xinfo_groups(stream):
            if info["name"] == self._group:
                return str(info["last-delivered-id"])
        return "0-0"  # no group (yet): any entry ends the watch, and the read recreates the group
