"""The bridge's Prometheus metrics, on the process's default registry.

``direction`` is ``in`` (requests topic -> lanes) or ``out`` (results stream -> results topic).
Outcomes: ``in``: ``published``, ``duplicate`` (the id already named a job), ``invalid`` (dead-lettered);
``out``: ``produced`` (acknowledged by Kafka, then XACKed), ``failed`` (Kafka refused; retried after the lease).
"""

from __future__ import annotations

from functools import cache

from prometheus_client import Counter, Gauge

RECORDS = Counter("streamcrew_kafka_records_total", "Records through the Kafka bridge, by direction and outcome", ["direction", "outcome"])
LAG = Gauge(
    "streamcrew_kafka_lag",
    "Records waiting: in = requests-topic records not yet published (partitions this bridge holds); "
    "out = result events not yet acknowledged by Kafka (group kafka-bridge: undelivered + pending)",
    ["direction"],
)


@cache
def records(direction: str, outcome: str) -> Counter:
    return RECORDS.labels(direction=direction, outcome=outcome)


@cache
def lag(direction: str) -> Gauge:
    return LAG.labels(direction=direction)
