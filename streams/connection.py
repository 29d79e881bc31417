"""Redis clients configured for streams: explicit timeouts, retries on connection errors."""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast
from urllib.parse import urlsplit

from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import AbstractConnection, BlockingConnectionPool, ConnectionPool
from redis.asyncio.retry import Retry
from redis._parsers import BaseParser
from redis.backoff import ExponentialBackoff
from redis.exceptions import AuthenticationError, RedisClusterException, ResponseError, SlotNotCoveredError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from streams.addresses import address_seeds
from streams.cluster_client import StreamsCluster, require_cluster_redis_py
from streams.errors import ConfigError
from streams.outage import HELD_BACK_CODES, WritesHeldBack, call_failing, until_redis_answers
from streams.seeds import first_and_others, seed_urls
from streams.urls import loggable_url

# Blocking reads wait at most this long, so the socket timeout must be larger.
BLOCK_MS = 1000
SOCKET_TIMEOUT_S = 15.0
# A cluster routes around a master that hangs (its replica takes over after cluster-node-timeout): every second
# a call waits on the hung node is a second all the partitions a worker reads in turn wait too. Measured, one
# master SIGSTOPped for good: a worker of every partition finished nothing on the healthy ones for 30 s at 15 s
# (two timeouts: the call, then redis-py's topology refresh asking the same node), 10 s at 5 s. Still above the
# longest block (a 2 s watch). ``?socket_timeout=`` in the URL overrides either.
CLUSTER_SOCKET_TIMEOUT_S = 5.0
CONNECT_TIMEOUT_S = 5.0
# A one-shot command (the CLI's stats, dead, job): a person waits for it, so a Redis that hangs ends it in seconds with
# a clear line. redis-py retries a command's connect as well as the command, so tries multiply: `stats` against a
# SIGSTOPped Redis took 137 s at the long-running processes' settings (3 x 3 tries x 15 s) and 20 s with one retry.
ONE_SHOT_TIMEOUT_S = 5.0
ONE_SHOT_RETRIES = 0
# A listed node silent this long at a start: the next listed one is asked too (far above a healthy answer, milliseconds,
# far under the socket timeout a node that hangs would otherwise cost; streams.slow_slots.SLOW_CALL_S alike)
NEXT_SEED_AFTER_S = 1.0
# What redis-py's cluster client raises (a plain RedisClusterException) when the nodes it asked do not cover every slot.
NOT_COVERED = "slots are not covered"
MIN_REDIS = (6, 2, 0)
# Connections of a single Redis's client at most (redis-py 8's default); more calls at once wait for one to free.
POOL_CONNECTIONS = 100
# Whether this redis-py's plain pool stops at a number of connections (8: 100; 5 - 7 take 2**31, and their waiting pool
# hangs on a Redis that hangs: it connects inside its wait, holding the lock, past every timeout).
CAPPED_POOLS = ConnectionPool().max_connections < 2**31


class NoticingRetry(Retry):
    """redis-py's Retry, telling the calling loop's :class:`~streams.outage.Backoff` of a call that timed out at once,
    while it is sent again: else the loop learnt of a hang only after every try (3 × 15 s), and logged nothing at
    all when the last one was answered."""

    async def call_with_retry(self, do: Any, fail: Any, *args: Any, **kwargs: Any) -> Any:
        sent_at = time.monotonic()

        async def failed(error: Exception, *more: Any) -> Any:
            call_failing(error, sent_at)
            return await fail(error, *more)

        return await super().call_with_retry(do, failed, *args, **kwargs)


def _client_options(retries: int = 2, timeout_s: float = SOCKET_TIMEOUT_S) -> dict[str, Any]:
    """What every client gets, single-node or cluster: replies as ``str``, explicit timeouts, retries on connection errors."""
    return {
        "decode_responses": True,
        # A raw XADD may hold bytes that are not UTF-8: they decode to lone surrogates (and encode back to the same
        # bytes) instead of failing the whole read, so the worker can reject that one entry (streams.envelope.not_utf8).
        "encoding_errors": "surrogateescape",
        "socket_timeout": timeout_s,
        "socket_connect_timeout": CONNECT_TIMEOUT_S,
        "socket_keepalive": True,
        "health_check_interval": 30,
        "retry": NoticingRetry(ExponentialBackoff(cap=1.0, base=0.05), retries=retries),
        "retry_on_error": [RedisConnectionError, RedisTimeoutError],
    }


class _WriteRaceGuard:
    """A write on a connection closed meanwhile raises ``ConnectionError``, as any lost connection does.

    redis-py 8.1 lets the transport's own error through instead: ``'NoneType' object has no attribute
    'writelines'`` (or ``... is not callable``) when another task disconnected it, and under uvloop
    ``RuntimeError: unable to perform operation on <TCPTransport closed=True ...>; the handler is closed``
    when the transport closed beneath it (redis-py issues #3546 and #4287, fixed upstream by #4288,
    released in 8.2.0, which raises ConnectionError itself; the guard stays for the 5.x – 8.1 releases
    pyproject.toml allows). Those are in no retry list, so during a cluster failover or reshard one ended a
    worker's loop instead of being retried. Mixed into whatever connection class the URL chose.
    """

    def set_parser(self, parser_class: type[BaseParser]) -> None:
        super().set_parser(_holding_back(parser_class))  # type: ignore[misc]

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        try:
            await super().send_packed_command(command, check_health)  # type: ignore[misc]
        except (AttributeError, TypeError, RuntimeError) as exc:
            if not any(sign in str(exc) for sign in CLOSED_TRANSPORT_SIGNS):
                raise
            raise RedisConnectionError("Connection closed while writing a command") from exc


# What the event loop says when a write meets a transport that is gone (asyncio's None writer, uvloop's closed handle).
CLOSED_TRANSPORT_SIGNS = ("NoneType", "the handler is closed")


_GUARDED: dict[type[AbstractConnection], type[AbstractConnection]] = {}
_HOLDING_BACK: dict[type[BaseParser], type[BaseParser]] = {}


def _holding_back(parser_class: type[BaseParser]) -> type[BaseParser]:
    """``parser_class`` raising :class:`~streams.outage.WritesHeldBack` for the error codes of Redis refusing writes
    for now (redis-py's parsers map an error's first word to its exception class; these have none there)."""
    if parser_class not in _HOLDING_BACK:
        classes = {**parser_class.EXCEPTION_CLASSES, **{code: WritesHeldBack for code in HELD_BACK_CODES}}
        _HOLDING_BACK[parser_class] = type(f"HoldingBack{parser_class.__name__}", (parser_class,), {"EXCEPTION_CLASSES": classes})
    return _HOLDING_BACK[parser_class]


def guarded(connection_class: type[AbstractConnection]) -> type[AbstractConnection]:
    """``connection_class`` with :class:`_WriteRaceGuard` mixed in (one class per base, so pools stay homogeneous)."""
    if issubclass(connection_class, _WriteRaceGuard):
        return connection_class
    if connection_class not in _GUARDED:
        _GUARDED[connection_class] = type(f"Guarded{connection_class.__name__}", (_WriteRaceGuard, connection_class), {})
    return _GUARDED[connection_class]


def url_option_problem(url: str) -> str | None:
    """Why redis-py's connection takes no option of ``url``'s query (``?bogus=1``, ``?ssl_cert_reqs=`` on redis://),
    or None: checked on a connection object, not connected, so it is one line at the start, not a TypeError at the
    first command. Quotes the option's name only, never the URL (it may hold a password)."""
    pool = ConnectionPool.from_url(url)
    try:
        pool.connection_class(**pool.connection_kwargs)
    except TypeError as exc:
        return f"it has an option redis-py does not take ({str(exc).split('argument ')[-1]})"
    return None


def connect(url: str, *, max_connections: int | None = None, retries: int = 2, timeout_s: float = SOCKET_TIMEOUT_S) -> Redis:
    """A client for ``url`` (redis://, rediss:// or unix://) that decodes replies to ``str``.

    redis-py 8's default socket timeout costs pipelined loops dearly, so every
    timeout is set explicitly. A URL that lists several nodes is for a cluster (:func:`connect_cluster`).
    """
    if len(seed_urls(url)) > 1:
        raise ConfigError("this Redis URL lists several nodes, which only a Redis Cluster client can use")
    options = _client_options(retries, timeout_s)
    if url.lower().startswith("unix:"):  # no TCP: redis-py's socket connection takes no keepalive option
        options.pop("socket_keepalive")
    if problem := url_option_problem(url):
        raise ConfigError(f"invalid Redis URL: {problem}")
    if CAPPED_POOLS:
        # A pool that waits for a free connection (up to the socket timeout) instead of failing: redis-py 8's pool stops
        # at 100 and raises MaxConnectionsError for the 101st call at once, and a Producer shared across tasks (an
        # asyncio.gather of many publishes, get_job or wait_for_terminal calls) makes one call per task.
        pool = BlockingConnectionPool.from_url(url, max_connections=max_connections or POOL_CONNECTIONS, timeout=timeout_s, **options)
        pool.connection_class = guarded(pool.connection_class)
        return Redis.from_pool(pool)
    client = Redis.from_url(url, max_connections=max_connections, **options)
    client.connection_pool.connection_class = guarded(client.connection_pool.connection_class)
    return client


def connect_cluster(url: str, *, max_connections: int | None = None, retries: int = 2,
                    timeout_s: float = CLUSTER_SOCKET_TIMEOUT_S) -> StreamsCluster:
    """A Redis Cluster client for ``url`` (any one node, or several: streams.seeds), with the timeouts of :func:`connect`.

    The client follows MOVED/ASK and refreshes its slot map after a failover; our reconnect
    backoff covers the seconds a failover takes. Given a list, redis-py asks the nodes in a random order:
    :func:`connect_detected` gives it the one node that answered its probe.
    """
    require_cluster_redis_py()
    first, others = first_and_others(url)
    client = cast(StreamsCluster, StreamsCluster.from_url(first, startup_nodes=[ClusterNode(host, port) for host, port in others] or None,
                                     max_connections=max_connections or 100, **_client_options(retries, timeout_s)))
    # Nodes learnt later are built from connection_kwargs; the startup nodes exist already.
    client.connection_kwargs["connection_class"] = guarded(client.connection_kwargs["connection_class"])
    for node in client.nodes_manager.startup_nodes.values():
        node.connection_class = client.connection_kwargs["connection_class"]
    return client


def hello_facts(reply: Any) -> dict[str, str] | None:
    """The string fields of a ``HELLO`` reply (``version``, ``mode``: standalone or cluster), or None if it is not one.

    redis-py 8 turns the reply into a dict; before 8 it is RESP2's flat list of field, value pairs.
    """
    if isinstance(reply, list) and len(reply) % 2 == 0 and all(isinstance(k, (str, bytes)) for k in reply[::2]):
        reply = dict(zip(reply[::2], reply[1::2]))
    if not isinstance(reply, dict):
        return None
    facts = {(k.decode() if isinstance(k, bytes) else str(k)): (v.decode() if isinstance(v, bytes) else v) for k, v in reply.items()}
    return {k: v for k, v in facts.items() if isinstance(v, str)} if "version" in facts else None


def says_cluster(facts: dict[str, str] | None, info: dict[str, Any]) -> bool:
    """Whether a server is a cluster node, from HELLO's facts, else from its INFO cluster section."""
    return facts["mode"] == "cluster" if facts else str(info.get("cluster_enabled", 0)) == "1"


async def _server_facts(redis: Redis, section: str) -> tuple[dict[str, str] | None, dict[str, Any]]:
    """``HELLO`` (no arguments): any ACL user may send it, while INFO is in ``@dangerous``, which least-privilege
    users lack; INFO ``section`` only where HELLO is refused (a proxy, a renamed command)."""
    try:
        # No arguments: no protocol switch. A cluster client sends it to one node (it names no key to route by).
        # (A node, not a flag: redis-py 8.1 routes a flag by the command's keys first, and HELLO names none.)
        options: dict[str, Any] = {"target_nodes": redis.get_default_node()} if isinstance(redis, RedisCluster) else {}
        facts = hello_facts(await redis.execute_command("HELLO", **options))  # type: ignore[no-untyped-call]
    except ResponseError:
        facts = None
    return (facts, {}) if facts else (None, dict(await redis.info(section)))


async def cluster_enabled(url: str) -> bool:
    """Whether the server at ``url`` is a Redis Cluster node (HELLO's ``mode``, else INFO's ``cluster_enabled``).

    A URL that lists several nodes asks them in turn until one answers, and that one must be a cluster node.
    """
    return await answering_cluster_node(url) is not None


async def answering_cluster_node(url: str, *, timeout_s: float | None = None, retries: int = 2) -> str | None:
    """The one-node URL of the first node ``url`` lists that answers, if it is a Redis Cluster node; None for a
    single Redis (see :func:`cluster_enabled`).

    Listed nodes are asked in the order given, the next one as soon as one refuses, or once the one asked last has
    been silent for ``NEXT_SEED_AFTER_S`` (happy-eyeballs style, earlier ones still asked): a node that hangs (a
    paused VM, a host gone without a reset) costs a start that second, not its 5 s socket timeout. The first answer
    wins and the other probes are cancelled. A host name with several addresses (a headless Service, a compose
    alias of every node: streams.addresses) is asked the same way, one address after another; there a single Redis
    answering is no error, and the URL is then used as given.
    """
    seeds = seed_urls(url)
    if len(seeds) > 1:
        return await _first_answer(seeds, listed=len(seeds), timeout_s=timeout_s or CLUSTER_SOCKET_TIMEOUT_S, retries=retries)
    if addresses := await address_seeds(url):  # maybe a single Redis (localhost's two): its own timeout, as below
        return await _first_answer(addresses, listed=1, timeout_s=timeout_s or SOCKET_TIMEOUT_S, retries=retries)
    return await _probe_seed(url, timeout_s=timeout_s or SOCKET_TIMEOUT_S, retries=retries)


async def _first_answer(seeds: list[str], *, listed: int, timeout_s: float, retries: int) -> str | None:
    """What the first of ``seeds`` to answer says (:func:`_probe_seed`), each asked ``NEXT_SEED_AFTER_S`` after the one
    before went silent, or at once when it failed; every one failing raises the last one's failure."""
    asked: dict[asyncio.Task[str | None], int] = {}
    failures: dict[int, BaseException] = {}
    try:
        while True:
            if len(asked) < len(seeds):
                last = len(asked) == len(seeds) - 1  # the last hope retries a blip, as a single node does
                seed = seeds[len(asked)]
                asked[asyncio.create_task(_probe_seed(seed, timeout_s=timeout_s, retries=retries if last else 0,
                                                        listed=listed))] = len(asked)
            running = [task for task in asked if not task.done()]
            more = len(asked) < len(seeds)
            done, _ = await asyncio.wait(running, timeout=NEXT_SEED_AFTER_S if more else None, return_when=asyncio.FIRST_COMPLETED)
            for task in sorted(done, key=asked.__getitem__):  # two answers at once: the one listed first
                error = task.exception()
                if error is None:
                    return task.result()
                if isinstance(error, AuthenticationError) or not isinstance(error, (RedisConnectionError, RedisTimeoutError, OSError)):
                    raise error  # the same credentials go to every node; a ConfigError says what is wrong with the list
                failures[asked[task]] = error
            if not more and all(task.done() for task in asked):
                raise failures[max(failures)]  # every node failed: the last one's failure is the outage
    finally:
        for task in asked:
            task.cancel()
        await asyncio.gather(*asked, return_exceptions=True)  # each closes its probe connection


async def _probe_seed(seed: str, *, timeout_s: float, retries: int, listed: int = 1) -> str | None:
    """``seed`` if it answers as a cluster node, None if as a single Redis; a ConfigError for a single Redis in a list."""
    probe = connect(seed, max_connections=1, retries=retries, timeout_s=timeout_s)
    try:
        facts, info = await _server_facts(probe, "cluster")
    finally:
        await probe.aclose()
    clustered = says_cluster(facts, info)
    if listed > 1 and not clustered:
        raise ConfigError(f"the Redis URL lists {listed} nodes, but {loggable_url(seed)} is not a Redis Cluster node: "
                          "name one node of a single Redis")
    return seed if clustered else None


async def connect_detected(url: str, *, max_connections: int | None = None, one_shot: bool = False) -> Redis:
    """:func:`connect`, or :func:`connect_cluster` when the server says it is a cluster node (no setting needed).

    ``one_shot``: for a command a person waits for (the CLI), which a Redis that hangs ends in seconds
    (``ONE_SHOT_TIMEOUT_S``, no retry: the person runs it again) instead of riding it out as the long-running processes do.

    The cluster client speaks the commands streamcrew uses with the same signatures, so it is typed as ``Redis``.
    """
    patience: dict[str, Any] = {"timeout_s": ONE_SHOT_TIMEOUT_S, "retries": ONE_SHOT_RETRIES} if one_shot else {}
    if (node := await answering_cluster_node(url, **patience)) is not None:
        # From the node that just answered alone: redis-py would ask the listed ones in a random order, waiting out
        # any that hangs; once started it knows every node of the cluster (its startup nodes follow the slot map).
        client = connect_cluster(node, max_connections=max_connections, **patience)
        client.seed_url = url
        # Learn the slot map now: redis-py's lazy first-use initialisation races concurrent first commands
        # (one can be sent on a node object the initialisation just replaced: AttributeError on writelines).
        try:
            # The command table from the node that just answered: redis-py asks its default node, the first master by
            # slot, which may be one that hangs (every try of a start would wait for it)
            await client.commands_parser.initialize(next(iter(client.nodes_manager.startup_nodes.values())))
            await client.initialize()
        except BaseException as exc:
            await client.aclose()
            if isinstance(exc, RedisClusterException) and NOT_COVERED in str(exc):  # a cluster being created, or a shard with no master: an outage, waited out
                raise SlotNotCoveredError(f"the Redis Cluster does not serve every slot yet ({exc})") from None
            raise
        # Keyless calls (HELLO for the version check at a start) go to the node that just answered: redis-py's default
        # is the first master by slot, which may be one that hangs, and each try of a start makes a new client.
        # (Its next map refresh sets its own default again; a default node that fails is replaced by redis-py.)
        answered = urlsplit(node)
        if (answered_node := client.get_node(host=answered.hostname, port=answered.port)) is not None:
            client.set_default_node(answered_node)
        return client  # type: ignore[return-value]
    return connect(url, max_connections=max_connections, **patience)


async def server_version(redis: Redis) -> tuple[int, ...]:
    facts, info = await _server_facts(redis, "server")
    version = facts["version"] if facts else str(info["redis_version"])
    return tuple(int(p) for p in version.split(".")[:3])


async def require_version(redis: Redis) -> tuple[int, ...]:
    """Fail early on a Redis too old for XAUTOCLAIM."""
    from streams.errors import RedisUnavailable

    version = await server_version(redis)
    if version < MIN_REDIS:
        raise RedisUnavailable(f"streamcrew needs Redis >= 6.2 (XAUTOCLAIM); this server is {'.'.join(map(str, version))}")
    return version


async def connect_when_reachable(url: str, what: str) -> Redis:
    """:func:`connect_detected` and :func:`require_version`, waiting out a Redis that is down or still loading.

    A long-running process started before its Redis (a pod rescheduled during an outage, compose without a
    health check) serves once Redis is there, as it rides out an outage later, instead of exiting into its
    supervisor's restart backoff (Kubernetes grows it to 5 minutes). Waiting cannot cure a refusal: a wrong
    password, an ACL or a Redis too old still fails at once.
    """
    async def checked() -> Redis:
        redis = await connect_detected(url)
        try:
            await require_version(redis)
        except BaseException:
            await redis.aclose()
            raise
        return redis

    return await until_redis_answers(what, checked, unless=(AuthenticationError,))


async def wait_reachable(url: str, what: str) -> None:
    """:func:`connect_when_reachable`, then let go: for a process that connects later (the gateway's app)."""
    await (await connect_when_reachable(url, what)).aclose()
