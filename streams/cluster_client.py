"""redis-py's asyncio cluster client with streamcrew's needs: reads placed by their keys without asking a node,
a loop's backoff told at once of a call that timed out, calls past a node's connections waiting for one, and the
cluster found again under the URL's name when none of the nodes it learnt answers. Made by
streams.connection.connect_cluster."""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
import time
from typing import Any

import redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.cluster import get_node_name
from redis.exceptions import RedisClusterException
from redis.exceptions import TimeoutError as RedisTimeoutError

from streams.addresses import seed_nodes
from streams.errors import ConfigError
from streams.outage import call_failing

# What redis-py's cluster client raises (a plain RedisClusterException, its RedisClusterUnreachableError where it has
# one) when none of the nodes it asked for the slot map answered.
NO_NODE_ANSWERS = "cannot be connected"

# The first redis-py whose cluster client refreshes its slot map through ``_refresh_topology``, which
# StreamsCluster wraps to find a cluster restarted on new addresses again; the cluster suite runs on it. Before it
# the wrapper is never called and a process asks the old addresses until restarted. A single Redis needs the base floor.
MIN_REDIS_PY = (8, 2)

# A node's connections kept out of the calls' gate (StreamsCluster._gate), for the pipelines that take theirs directly.
PIPELINE_CONNECTIONS = 10

log = logging.getLogger(__name__)


def release_of(version: str) -> tuple[int, ...]:
    """A version's first two numbers, compared as numbers ("8.10" is after "8.2"; "8.2rc1" is 8.2)."""
    return tuple(int(part) for part in re.findall(r"\d+", version)[:2])


# The parameters StreamsCluster._refresh_topology passes on to redis-py's (by name).
REFRESH_PARAMETERS = ("additional_startup_nodes_info", "last_failed_node_name")


def refresh_hook_fits(cluster_class: type = RedisCluster) -> bool:
    """Whether ``cluster_class`` refreshes its slot map through a ``_refresh_topology`` that takes the parameters
    :class:`StreamsCluster` passes on. A private method: a later redis-py may drop it (the override would never run)
    or rename a parameter (every refresh would fail with a TypeError)."""
    hook = getattr(cluster_class, "_refresh_topology", None)
    if hook is None:
        return False
    try:
        parameters = inspect.signature(hook).parameters
    except (TypeError, ValueError):
        return False
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    return takes_any or all(name in parameters for name in REFRESH_PARAMETERS)


def require_cluster_redis_py(installed: str = redis.__version__, cluster_class: type = RedisCluster) -> None:
    """Refuse, in one line that says what to install, a redis-py too old for :class:`StreamsCluster` (the base install
    allows redis-py 5 for a single Redis, and an environment may hold an older one than pip would pick), or a later
    one whose cluster client no longer has the slot map refresh it extends."""
    wanted = ".".join(map(str, MIN_REDIS_PY))
    if release_of(installed) < MIN_REDIS_PY:
        raise ConfigError(f"this Redis is a Redis Cluster node: streamcrew on Redis Cluster needs redis-py >= {wanted}, and this "
                          f"environment has {installed}; pip install -U 'redis[hiredis]>={wanted}'")
    if not refresh_hook_fits(cluster_class):
        raise ConfigError(f"this Redis is a Redis Cluster node: streamcrew's cluster client extends redis-py's slot map refresh "
                          f"(RedisCluster._refresh_topology({', '.join(REFRESH_PARAMETERS)})), which redis-py {installed} "
                          f"does not have in that form; install the release streamcrew was tested with: "
                          f"pip install 'redis[hiredis]=={wanted}.*'")


class StreamsCluster(RedisCluster):
    """redis-py's cluster client, placing XREAD / XREADGROUP by their stream keys without asking the server.

    Their keys follow ``STREAMS`` (a "movablekeys" command), so redis-py 8.1 sends ``COMMAND GETKEYS``
    to a node before every read to learn them: two round trips per read, and a worker reads a lane of
    every partition in turn. Keys and ids after ``STREAMS`` come in two equal halves; anything else
    goes to redis-py as before.
    """

    async def _determine_slot(self, command: str, *args: Any) -> int:
        name = str(command).upper()
        if name in ("XREAD", "XREADGROUP"):
            skip = 3 if name == "XREADGROUP" else 0  # GROUP <group> <consumer>: names that could read "streams"
            words = [a.upper() if isinstance(a, (str, bytes)) else a for a in args]
            at = next((i for i in range(skip, len(words)) if words[i] in ("STREAMS", b"STREAMS")), None)
            if at is not None:
                rest = args[at + 1 :]
                slots = {self.keyslot(k) for k in rest[: len(rest) // 2]}
                if len(rest) % 2 == 0 and len(slots) == 1:
                    return slots.pop()
        return await super()._determine_slot(command, *args)

    # The URL the process was given (set by streams.connection.connect_detected): the client starts from one node of it, then knows
    # the nodes by the addresses the cluster names, and forgets the URL's (redis-py's dynamic startup nodes).
    seed_url: str | None = None
    _asking_seed_url = False

    async def _refresh_topology(self, additional_startup_nodes_info: list[tuple[str, int]] | None = None,
                                last_failed_node_name: str | None = None) -> None:
        """redis-py's refresh of the slot map, asking the nodes of :attr:`seed_url` as they resolve now when none of the
        nodes the client knows answers and the URL names one it does not know.

        A whole cluster restarted on new addresses (every pod rescheduled at once, a compose project brought down and
        up) answers at none of the old ones: before, a process kept asking them until it was restarted, serving
        nothing meanwhile (and its liveness probe, /metrics, still answered). A plain outage costs one lookup a refresh.
        """
        try:
            await super()._refresh_topology(additional_startup_nodes_info=additional_startup_nodes_info,
                                            last_failed_node_name=last_failed_node_name)
        except RedisClusterException as exc:
            if NO_NODE_ANSWERS not in str(exc):  # nodes that answered with a slot map that cannot serve (yet)
                raise
            known = {*self.nodes_manager.startup_nodes, *self.nodes_manager.nodes_cache}
            if self.seed_url is None or not (fresh := [n for n in await seed_nodes(self.seed_url) if get_node_name(*n) not in known]):
                raise
            if not self._asking_seed_url:  # once an outage: under TLS the URL's name is never a known node
                log.warning("no known Redis Cluster node answers; asking the %d node(s) the Redis URL names now", len(fresh))
                self._asking_seed_url = True
            await super()._refresh_topology(additional_startup_nodes_info=[*(additional_startup_nodes_info or []), *fresh],
                                            last_failed_node_name=last_failed_node_name)
            log.warning("found the Redis Cluster again at the nodes the Redis URL names now")
        self._asking_seed_url = False

    async def _execute_command(self, target_node: ClusterNode, *args: Any, **kwargs: Any) -> Any:
        """One try of a call on one node, telling the calling loop's backoff at once when it timed out
        (streams.connection.NoticingRetry's job on a single Redis): the cluster client retries in a loop of its own, which
        only reads the retry object's count and backoff, so before, a loop learnt of a hung master after every
        try (3 × 5 s), or never when the promoted replica answered a later one. (Pipelines read on tasks of their
        own: their loops still learn of it once the tries are spent.)

        Calls past a node's connections wait for one to free (:meth:`_gate`) instead of failing."""
        sent_at = time.monotonic()
        try:
            async with self._gate(target_node):
                return await super()._execute_command(target_node, *args, **kwargs)
        except RedisTimeoutError as exc:
            call_failing(exc, sent_at)
            raise

    def _gate(self, node: ClusterNode) -> asyncio.Semaphore:
        """How many calls may be on ``node`` at once: redis-py holds a node to ``max_connections`` and fails the call past
        them at once (MaxConnectionsError), and a Producer shared across tasks (an asyncio.gather of many publishes)
        makes one call per task. A few connections stay for pipelines, which take theirs without a call."""
        gates: dict[str, asyncio.Semaphore] = self.__dict__.setdefault("_node_gates", {})
        if (gate := gates.get(node.name)) is None:
            gate = gates[node.name] = asyncio.Semaphore(max(1, node.max_connections - PIPELINE_CONNECTIONS))
        return gate
