"""The faust app of the bridge: two agents, the ``kafka-bridge`` group on the results stream, lag gauges.

The only module that imports faust. ``build_bridge`` wires an app to a Redis client (tests drive its
agents through faust's ``agent.test_context()``); ``run_bridge`` is the process: start, serve until
SIGTERM/SIGINT, drain the results in flight, stop (the consumer commits the offsets of handled records).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import shutil
import socket
import ssl
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import faust
from aiokafka.errors import KafkaError
from faust.types import TP
from redis.asyncio import Redis

from consumers.kafka_bridge import metrics
from consumers.kafka_bridge.records import Coordinates
from consumers.kafka_bridge.requests_in import BatchOutcome, RecordIn, RequestsIn
from consumers.kafka_bridge.results_out import KAFKA_BRIDGE_GROUP, ResultBatch, ResultsOut, ResultsReader
from consumers.kafka_bridge.settings import KafkaBridgeSettings
from consumers.lifecycle import stop_on_signals
from consumers.metrics_server import serve_metrics
from streams.connection import connect_when_reachable
from streams.gauges import register_stream_gauges
from streams.groups import ensure_group
from streams.keys import Keys, serving_partitions
from streams.layout import hold_layout
from streams.runtime import GroupRuntime

log = logging.getLogger("streamcrew.kafka_bridge")

# Records taken from the requests topic at once (one Lua publish per lane), and how long a partial batch waits.
REQUEST_BATCH = 500
REQUEST_BATCH_WITHIN_S = 0.01
LAG_EVERY_S = 5.0
# Result batches awaiting Kafka's acknowledgement at once: one round trip per batch would bound the rate.
RESULT_BATCHES_IN_FLIGHT = 4
UNAVAILABLE = 4  # the CLI's exit code for a service it cannot reach


def consumer_name() -> str:
    return f"kafka-bridge-{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(2)}"


def credentials(settings: KafkaBridgeSettings) -> faust.types.auth.CredentialsT | None:
    """faust's credentials for the configured security protocol (None for PLAINTEXT)."""
    protocol = settings.kafka_security_protocol
    context: ssl.SSLContext | None = None
    if protocol in ("SSL", "SASL_SSL"):
        context = ssl.create_default_context(purpose=ssl.Purpose.SERVER_AUTH, cafile=settings.kafka_ssl_cafile)
        if settings.kafka_ssl_certfile:
            context.load_cert_chain(settings.kafka_ssl_certfile, settings.kafka_ssl_keyfile)
    if protocol == "SSL":
        assert context is not None
        return faust.SSLCredentials(context)
    if protocol.startswith("SASL_"):
        assert settings.kafka_sasl_username and settings.kafka_sasl_password
        return faust.SASLCredentials(username=settings.kafka_sasl_username, password=settings.kafka_sasl_password.get_secret_value(),
                                     mechanism=settings.kafka_sasl_mechanism, ssl_context=context)
    return None


@dataclass
class Bridge:
    """One faust app and what it drives; ``requests_agent`` and ``results_agent`` are the two faust agents.

    ``partitions`` are the streamcrew partitions whose results stream this bridge reads (all, or ``--partitions``).
    """

    app: faust.App
    requests_agent: Any
    results_agent: Any
    requests_in: RequestsIn
    results_out: ResultsOut
    runtime: GroupRuntime
    datadir: str
    partitions: tuple[Keys, ...]
    processed: dict[TP, int] = field(default_factory=dict)

    async def update_lag(self, redis: Redis, requests_topic: str) -> None:
        """``streamcrew_kafka_lag``: records behind on the partitions held, result events not yet acknowledged."""
        behind = 0
        for tp in self.app.consumer.assignment():
            if tp.topic == requests_topic and tp in self.processed:
                behind += max(0, self.app.consumer.highwater(tp) - self.processed[tp] - 1)
        metrics.lag("in").set(behind)
        await self.update_results_lag(redis)

    async def update_results_lag(self, redis: Redis) -> None:
        """``streamcrew_kafka_lag{direction="out"}``: result events of the partitions served not yet acknowledged by Kafka.

        A partition whose group lag Redis cannot tell (nil: Redis 6, or an entry deleted before the group read it)
        leaves the sum unknown: the series is left out until it is known again, as ``streamcrew_group_lag`` is;
        a 0 would say nothing waits."""
        waiting = 0
        for keys in self.partitions:
            groups = await redis.xinfo_groups(keys.results)
            info = next((g for g in groups if g.get("name") == KAFKA_BRIDGE_GROUP), None)
            if info is None:
                continue
            if info.get("lag") is None:
                metrics.lag_unknown("out")
                return
            waiting += int(info["lag"]) + int(info.get("pending") or 0)
        metrics.lag("out").set(waiting)


def build_bridge(settings: KafkaBridgeSettings, redis: Redis, *, consumer: str | None = None) -> Bridge:
    """The faust app with its two agents, bound to ``redis``; nothing connects until the app starts."""
    keys = Keys(settings.prefix)
    partitions = serving_partitions(keys, settings, settings.chosen_partitions)
    datadir = tempfile.mkdtemp(prefix="streamcrew-kafka-bridge-")  # faust wants one; store is memory://
    app = faust.App(
        settings.kafka_group_id,
        broker=settings.kafka_broker,
        broker_credentials=credentials(settings),
        store="memory://",
        datadir=datadir,
        web_enabled=False,
        autodiscover=False,
        topic_partitions=settings.kafka_topic_partitions,
        topic_disable_leader=True,
        consumer_auto_offset_reset="earliest",  # records sent before the first bridge started are read, like groups at ID 0
        producer_acks=-1,  # acknowledged = written by every in-sync replica
        broker_session_timeout=settings.kafka_session_timeout_s,
        broker_heartbeat_interval=min(3.0, settings.kafka_session_timeout_s / 3),
    )
    raw: dict[str, Any] = {"key_type": bytes, "value_type": bytes, "key_serializer": "raw", "value_serializer": "raw"}
    requests_topic = app.topic(settings.kafka_requests_topic, **raw)
    results_topic = app.topic(settings.kafka_results_topic, **raw)
    results_channel = app.channel()

    runtime = GroupRuntime(redis, streams=[p.results for p in partitions], level_size=len(partitions), group=KAFKA_BRIDGE_GROUP, consumer=consumer or consumer_name(),
                           concurrency=settings.concurrency, lease_s=settings.lease_s, forget_idle_s=settings.consumer_idle_s)

    async def send(key: bytes, value: bytes) -> Any:
        return await results_topic.send(key=key, value=value)

    requests_in = RequestsIn(redis, keys, max_request_bytes=settings.max_request_bytes, partitions=settings.partitions,
                             dead_once_s=settings.job_ttl_s)
    results_out = ResultsOut(redis, send=send, release=runtime.release, partitions=partitions, dead_once_s=settings.job_ttl_s)
    runtime.handler = ResultsReader(redis, partitions, deliver=lambda batch: results_channel.send(value=batch), release=runtime.release,
                                    let_go=runtime.leases.let_go, dead_once_s=settings.job_ttl_s)
    processed: dict[TP, int] = {}

    @app.agent(requests_topic, name="requests_to_lanes")
    async def requests_to_lanes(stream: faust.StreamT[bytes]) -> AsyncIterator[BatchOutcome]:
        """Requests topic -> lanes; the offsets of a batch are acked after it is published or dead-lettered."""
        async for events in stream.take_events(REQUEST_BATCH, within=REQUEST_BATCH_WITHIN_S):
            records = []
            for event in events:
                m = event.message
                records.append(RecordIn(event.key, event.value, Coordinates(m.topic, m.partition, m.offset, round(m.timestamp * 1000) if m.timestamp else None)))
                processed[m.tp] = max(processed.get(m.tp, -1), m.offset)
            yield await requests_in.handle(records)

    @app.agent(results_channel, name="results_to_topic", concurrency=RESULT_BATCHES_IN_FLIGHT)
    async def results_to_topic(stream: faust.StreamT[ResultBatch]) -> AsyncIterator[list[str]]:
        """Results stream -> results topic, keyed by job id; each entry XACKed once Kafka acknowledged it."""
        async for batch in stream:
            yield await results_out.forward(batch)

    bridge = Bridge(app, requests_to_lanes, results_to_topic, requests_in, results_out, runtime, datadir, partitions, processed)

    @app.timer(LAG_EVERY_S)
    async def lag() -> None:
        try:
            await bridge.update_lag(redis, settings.kafka_requests_topic)
        except Exception as exc:  # noqa: BLE001 - a gauge is not worth a crash
            log.debug("kafka-bridge: lag not updated: %s", exc)

    return bridge


def _quiet_libraries(level: str) -> None:
    """faust, mode and aiokafka narrate every service start at INFO; ours say what matters. aiokafka's connection
    logger stays above DEBUG at every level: there it logs each request, the SASL password's among them."""
    if level.lower() != "debug":
        for name in ("faust", "mode", "aiokafka"):
            logging.getLogger(name).setLevel(logging.WARNING)
    logging.getLogger("aiokafka.conn").setLevel(max(logging.INFO, logging.getLogger("aiokafka.conn").getEffectiveLevel()))


def close_unused_thread_loop(app: faust.App) -> None:
    """Close the loop of a Kafka consumer thread that never ran.

    mode's ServiceThread makes its event loop when the consumer is built and closes it only when its thread ran;
    a start that failed before (Kafka unreachable) left it open, and at interpreter exit the garbage collector
    sometimes reached it after its sockets: a traceback under the one clear line."""
    thread = getattr(getattr(app, "_consumer", None), "_thread", None)
    loop = getattr(thread, "thread_loop", None)
    if isinstance(loop, asyncio.AbstractEventLoop) and not loop.is_running() and not loop.is_closed():
        loop.close()


def _broker_for_logs(url: str) -> str:
    return ";".join(part.split("@")[-1] for part in url.replace(",", ";").split(";"))


async def run_bridge(settings: KafkaBridgeSettings) -> int:
    """Serve until SIGTERM/SIGINT, then drain; a second signal exits at once. Returns the exit code."""
    _quiet_libraries(settings.log_level)
    keys = Keys(settings.prefix)
    redis = await connect_when_reachable(settings.effective_redis_url, "kafka-bridge start")  # a Redis Cluster is found, not configured
    await hold_layout("kafka-bridge start", redis, keys, settings.partitions)  # another N: refused
    bridge = build_bridge(settings, redis)
    if settings.metrics_port:
        register_stream_gauges(settings.effective_redis_url, keys, partitions=settings.partitions)
        serve_metrics(settings.metrics_port, settings.metrics_host)
    stop = stop_on_signals(f"kafka-bridge {bridge.runtime.consumer}", settings.grace_s)
    broker = _broker_for_logs(settings.kafka_broker)
    log.info("kafka-bridge %s: connecting to %s (group %s)", bridge.runtime.consumer, broker, settings.kafka_group_id)
    stop_task = asyncio.create_task(stop.wait())
    start_task = asyncio.create_task(bridge.app.start())
    await asyncio.wait({start_task, stop_task}, return_when=asyncio.FIRST_COMPLETED)
    code = 0
    run_task: asyncio.Task[None] | None = None
    started = start_task.done() and not stop.is_set()
    if started and (problem := start_task.exception()) is not None:
        if not isinstance(problem, KafkaError):
            raise problem
        log.error("kafka-bridge: cannot reach Kafka at %s: %s", broker, problem)
        code, started = UNAVAILABLE, False
    if started:
        # The results group only once Kafka answered: made by a bridge that never reached Kafka, it would hold every
        # result back from the trim (trim_results.lua keeps what a group has not read) for a reader that never comes
        for partition in bridge.partitions:
            await ensure_group(redis, partition.results, KAFKA_BRIDGE_GROUP)
        run_task = asyncio.create_task(bridge.runtime.run())
        log.info("kafka-bridge %s ready: %s -> lanes, results -> %s, broker %s, prefix %s%s", bridge.runtime.consumer,
                 settings.kafka_requests_topic, settings.kafka_results_topic, broker, settings.prefix,
                 f", results of partitions {settings.serve_partitions or 'all'} of {settings.partitions}" if settings.partitions > 1 else "")
        await asyncio.wait({run_task, stop_task}, return_when=asyncio.FIRST_COMPLETED)
        if run_task.done() and not run_task.cancelled() and run_task.exception() is not None:
            log.error("kafka-bridge: the results reader crashed: %r", run_task.exception())
            code = 1
        finished, handed_back = await bridge.runtime.drain(settings.grace_s)
        log.info("kafka-bridge %s stopping: %d result entries finished, %d handed back", bridge.runtime.consumer, finished, handed_back)
    start_task.cancel()
    stop_task.cancel()
    await bridge.app.stop()
    close_unused_thread_loop(bridge.app)
    if run_task is not None:
        run_task.cancel()
        await asyncio.gather(run_task, return_exceptions=True)
    await redis.aclose()
    shutil.rmtree(bridge.datadir, ignore_errors=True)
    log.info("kafka-bridge %s stopped", bridge.runtime.consumer)
    return code
