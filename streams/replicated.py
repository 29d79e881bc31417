"""A script call and the WAIT after it, on ONE connection: WAIT counts the replicas holding that connection's writes.

Redis's WAIT blocks until replicas acknowledge the calling client's last write; sent on another
pooled connection (one that wrote nothing, or wrote earlier) it returns at once. So the EVALSHA and
the WAIT go out together, pipelined on one connection: a plain client's non-transactional
pipeline, or on a cluster one connection of the master that owns the script's keys.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import PipelineCommand, RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import AskError, ClusterDownError, NoScriptError, ReadOnlyError, RedisClusterException, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

# What a failover or a resharding answers a call sent straight to the master the client last knew.
REROUTE = (AskError, TryAgainError, ClusterDownError, ReadOnlyError)  # MovedError is an AskError
UNREACHABLE = (RedisConnectionError, RedisTimeoutError, OSError)

log = logging.getLogger(__name__)


class Rerouted(Exception):
    """The keys' master was unreachable or sent the call elsewhere (a failover, a resharding): route it as usual."""


async def call_and_wait(redis: Redis, script: AsyncScript, keys: list[str], args: list[Any], replicas: int,
                        timeout_ms: int) -> tuple[Any, int]:
    """Run ``script`` and WAIT for ``replicas`` on the same connection; its reply and how many replicas acknowledged.

    A NOSCRIPT loads the script and tries once more. On a cluster a redirection or an unreachable
    master raises :class:`Rerouted` (the caller writes through the client's own routing instead).
    """
    evalsha = ("EVALSHA", script.sha, len(keys), *keys, *args)
    wait = ("WAIT", replicas, timeout_ms)
    for attempt in range(2):
        try:
            if isinstance(redis, RedisCluster):
                reply, acked = await _on_master(redis, keys[0], evalsha, wait)
            else:
                reply, acked = await _pipelined(redis, evalsha, wait)
            return reply, int(acked)
        except NoScriptError:
            if attempt:
                raise
            await redis.script_load(script.script)
    raise AssertionError("unreachable")


async def _pipelined(redis: Redis, *commands: tuple[Any, ...]) -> list[Any]:
    """The commands pipelined (no MULTI) on one pooled connection; the first error raised as Redis sent it."""
    async with redis.pipeline(transaction=False) as pipe:
        for command in commands:
            pipe.execute_command(*command)
        replies = await pipe.execute(raise_on_error=False)  # raised by redis-py, an error would quote the batch's data
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return list(replies)


async def _on_master(cluster: RedisCluster, key: str, *commands: tuple[Any, ...]) -> list[Any]:
    """The commands pipelined on one connection of ``key``'s master (a ClusterPipeline may split them on a retry)."""
    try:
        await cluster.initialize()  # a no-op once the client knows the slots
        node = cluster.get_node_from_key(key)
    except (RedisClusterException, *UNREACHABLE) as exc:
        raise Rerouted(f"no master known for {key}: {exc}") from exc
    if node is None:
        raise Rerouted(f"no master known for {key}")
    queued = [PipelineCommand(i, *command) for i, command in enumerate(commands)]
    try:
        await node.execute_pipeline(queued)
    except UNREACHABLE as exc:
        raise Rerouted(f"{node.name}: {exc}") from exc
    for command in queued:
        if isinstance(command.result, REROUTE):
            raise Rerouted(f"{node.name}: {command.result}") from command.result
        if isinstance(command.result, Exception):
            raise command.result
    return [command.result for command in queued]


class Shortfalls:
    """Writes that went without their replicas' acknowledgement, told once per spell and partition.

    A replica down for minutes would otherwise log a line for every batch of its master's partitions (about one a
    second each): one line when a partition's writes start going without, one when they are acknowledged again.
    """

    def __init__(self, what: str, timeout_ms: int) -> None:
        self.what = what
        self.timeout_ms = timeout_ms
        self._spells: dict[int, tuple[float, int]] = {}  # partition -> (since, writes that went without)

    def count(self, partition: int, acked: int, wanted: int) -> None:
        """Note one write of ``partition`` and how many of the ``wanted`` replicas acknowledged it."""
        spell = self._spells.get(partition)
        if acked >= wanted:
            if spell is not None:
                del self._spells[partition]
                log.warning("%s of partition %d acknowledged by %d replicas again after %.1fs (%d went without)",
                            self.what, partition, wanted, time.monotonic() - spell[0], spell[1])
        elif spell is None:
            self._spells[partition] = (time.monotonic(), 1)
            log.warning("%s of partition %d acknowledged by %d of %d replicas within %d ms; going on without them "
                        "(said again once they acknowledge)", self.what, partition, acked, wanted, self.timeout_ms)
        else:
            self._spells[partition] = (spell[0], spell[1] + 1)
