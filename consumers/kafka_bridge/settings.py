"""Settings of ``streamcrew kafka-bridge``, read once at the edge (``STREAMCREW_*``); no faust import here."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from consumers.settings import ServesMetrics
from streams.keys import parse_partitions
from streams.urls import loggable_url

DEFAULT_KAFKA_BRIDGE_METRICS_PORT = 9103
SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


class KafkaBridgeSettings(ServesMetrics):
    """``streamcrew kafka-bridge``: every field is also a ``STREAMCREW_*`` variable."""

    kafka_broker: str = Field(
        default="kafka://localhost:9092",
        description="Kafka bootstrap servers, kafka://host:port (several separated by ';')",
    )
    kafka_requests_topic: str = Field(default="streamcrew-requests", min_length=1, description="topic the bridge reads requests from")
    kafka_results_topic: str = Field(default="streamcrew-results", min_length=1, description="topic the bridge produces result events to")
    kafka_group_id: str = Field(
        default="streamcrew-kafka-bridge", min_length=1,
        description="Kafka consumer group (faust app id) of the requests topic; bridges sharing it split its partitions",
    )
    kafka_topic_partitions: int = Field(
        default=8, ge=1, le=10_000,
        description="no effect, kept for compatibility: the bridge creates no topics (docs/kafka.md: create them, or the broker's auto-create does)",
    )
    kafka_security_protocol: SecurityProtocol = Field(default="PLAINTEXT", description="PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL")
    kafka_sasl_mechanism: SaslMechanism = Field(default="PLAIN", description="PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (SASL_* protocols)")
    kafka_sasl_username: str | None = Field(default=None, description="SASL user name")
    kafka_sasl_password: SecretStr | None = Field(default=None, description="SASL password (prefer the env variable; never logged)")
    kafka_ssl_cafile: str | None = Field(default=None, description="CA bundle that signs the brokers' certificates (SSL, SASL_SSL); default: the system's")
    kafka_ssl_certfile: str | None = Field(default=None, description="client certificate for mutual TLS")
    kafka_ssl_keyfile: str | None = Field(default=None, description="key of the client certificate")
    kafka_session_timeout_s: float = Field(
        default=30.0, gt=0, description="seconds the group waits for a silent bridge before giving its partitions to another",
    )
    serve_partitions: str = Field(
        default="", description="streamcrew partitions whose results this bridge reads, e.g. 0-3,5 (CLI --partitions); empty = all of STREAMCREW_PARTITIONS",
    )
    concurrency: int = Field(default=2000, ge=1, le=100_000, description="result events held (sent, awaiting Kafka's acknowledgement) at once")
    metrics_port: int = Field(default=DEFAULT_KAFKA_BRIDGE_METRICS_PORT, ge=0, le=65535, description="port of /metrics; 0 = off")
    grace_s: float = Field(default=10.0, ge=0, description="seconds a stopping bridge lets result events in flight reach Kafka")
    log_level: str = Field(default="info", description="debug, info, warning or error")

    @field_validator("kafka_broker")
    @classmethod
    def _kafka_urls(cls, value: str) -> str:
        for url in value.replace(",", ";").split(";"):
            if url.strip() and not url.strip().startswith("kafka://"):
                raise ValueError(f"broker must be kafka://host:port, got {loggable_url(url.strip())[:60]!r}")  # never its credentials
        return value

    @model_validator(mode="after")
    def _sasl_needs_credentials(self) -> KafkaBridgeSettings:
        if self.kafka_security_protocol.startswith("SASL_") and not (self.kafka_sasl_username and self.kafka_sasl_password):
            raise ValueError(f"{self.kafka_security_protocol} needs STREAMCREW_KAFKA_SASL_USERNAME and STREAMCREW_KAFKA_SASL_PASSWORD")
        if self.kafka_requests_topic == self.kafka_results_topic:
            raise ValueError("the requests and results topics must differ")
        parse_partitions(self.serve_partitions, self.partitions)
        return self

    @property
    def chosen_partitions(self) -> tuple[int, ...]:
        """The partitions whose results stream this bridge reads (requests go to every partition, by job id)."""
        return parse_partitions(self.serve_partitions, self.partitions)
