"""``streamcrew kafka-bridge``: the Kafka bridge (contract §11); faust is imported only when it runs."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from consumers.cli_base import Exit, MetricsHost, Prefix, RedisUrl, app, build, err, run, setup_logging

KAFKA_EXTRA_HINT = "the Kafka bridge needs faust-streaming: pip install 'streamcrew[kafka]'"


@app.command("kafka-bridge")
def kafka_bridge(
    broker: Annotated[str | None, typer.Option(help="Kafka bootstrap servers, kafka://HOST:9092 \\[env STREAMCREW_KAFKA_BROKER, default kafka://localhost:9092]")] = None,
    requests_topic: Annotated[str | None, typer.Option(help="topic of requests \\[env STREAMCREW_KAFKA_REQUESTS_TOPIC, default streamcrew-requests]")] = None,
    results_topic: Annotated[str | None, typer.Option(help="topic of result events \\[env STREAMCREW_KAFKA_RESULTS_TOPIC, default streamcrew-results]")] = None,
    group_id: Annotated[str | None, typer.Option(help="Kafka consumer group of the requests topic \\[env STREAMCREW_KAFKA_GROUP_ID, default streamcrew-kafka-bridge]")] = None,
    topic_partitions: Annotated[int | None, typer.Option(help="no effect, kept for compatibility: the bridge creates no topics (docs/kafka.md) \\[env STREAMCREW_KAFKA_TOPIC_PARTITIONS]")] = None,
    security_protocol: Annotated[str | None, typer.Option(help="PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL \\[env STREAMCREW_KAFKA_SECURITY_PROTOCOL]")] = None,
    sasl_mechanism: Annotated[str | None, typer.Option(help="PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 \\[env STREAMCREW_KAFKA_SASL_MECHANISM]")] = None,
    sasl_username: Annotated[str | None, typer.Option(help="SASL user \\[env STREAMCREW_KAFKA_SASL_USERNAME]")] = None,
    ssl_cafile: Annotated[str | None, typer.Option(help="CA bundle of the brokers' certificates \\[env STREAMCREW_KAFKA_SSL_CAFILE]")] = None,
    ssl_certfile: Annotated[str | None, typer.Option(help="client certificate (mutual TLS) \\[env STREAMCREW_KAFKA_SSL_CERTFILE]")] = None,
    ssl_keyfile: Annotated[str | None, typer.Option(help="key of the client certificate \\[env STREAMCREW_KAFKA_SSL_KEYFILE]")] = None,
    session_timeout: Annotated[float | None, typer.Option(help="seconds the group waits for a silent bridge \\[env STREAMCREW_KAFKA_SESSION_TIMEOUT_S, default 30]")] = None,
    partitions: Annotated[str | None, typer.Option("--partitions", help="streamcrew partitions whose results this bridge reads, e.g. 0-3,5 \\[env STREAMCREW_SERVE_PARTITIONS, default: all]")] = None,
    concurrency: Annotated[int | None, typer.Option(help="result events awaiting Kafka's acknowledgement at once \\[env STREAMCREW_CONCURRENCY, default 2000]")] = None,
    lease: Annotated[float | None, typer.Option(help="lease seconds of held result events \\[env STREAMCREW_LEASE_S, default 60]")] = None,
    metrics_port: Annotated[int | None, typer.Option(help="port of /metrics, 0 = off \\[env STREAMCREW_METRICS_PORT, default 9103]")] = None,
    metrics_host: MetricsHost = None,
    grace: Annotated[float | None, typer.Option(help="drain grace seconds \\[env STREAMCREW_GRACE_S, default 10]")] = None,
    log_level: Annotated[str | None, typer.Option(help="debug, info, warning, error")] = None,
    redis_url: RedisUrl = None,
    prefix: Prefix = None,
) -> None:
    """Kafka bridge: requests topic -> lanes (idempotent on the job id), results -> results topic (XACK after Kafka's ack)."""
    try:
        from consumers.kafka_bridge.app import run_bridge
    except ImportError as exc:
        if (exc.name or "").split(".")[0] not in ("faust", "mode", "aiokafka"):
            raise
        err.print(f"[red]{escape(KAFKA_EXTRA_HINT)}[/red]")
        raise typer.Exit(Exit.USAGE) from None
    from consumers.kafka_bridge.settings import KafkaBridgeSettings

    settings = build(KafkaBridgeSettings, kafka_broker=broker, kafka_requests_topic=requests_topic, kafka_results_topic=results_topic,
                     kafka_group_id=group_id, kafka_topic_partitions=topic_partitions, kafka_security_protocol=security_protocol,
                     kafka_sasl_mechanism=sasl_mechanism, kafka_sasl_username=sasl_username, kafka_ssl_cafile=ssl_cafile,
                     kafka_ssl_certfile=ssl_certfile, kafka_ssl_keyfile=ssl_keyfile, kafka_session_timeout_s=session_timeout, serve_partitions=partitions, concurrency=concurrency, lease_s=lease,
                     metrics_port=metrics_port, metrics_host=metrics_host, grace_s=grace, log_level=log_level, redis_url=redis_url, prefix=prefix)
    setup_logging(settings.log_level)
    raise typer.Exit(run(run_bridge(settings)))
