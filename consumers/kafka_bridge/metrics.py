"""The bridge's Prometheus metrics, on the process's default registry.

``direction`` is ``in`` (requests topic -> lanes) or ``out`` (results stream -> results topic).
Outcomes: ``in``: ``published``, ``duplicate`` (the id already named a job), ``invalid`` (dead-lettered);
``out``: ``produced`` (acknowledged by Kafka, then XACKed), ``failed`` (Kafka refused; retried after the lease).
"""

from __future__ import annotations

from contextlib import suppress
from functools import cache

from prometheus_client import Counter, Gauge

RECORDS = Counter("streamcrew_kafka_records_total", "Records through the Kafka bridge, by direction and outcome", ["direction", "outcome"])
LAG = Gauge(
    "streamcrew_kafka_lag",
    "Records waiting: in = requests-topic records not yet published (partitions this bridge holds); "
    "out = result events not yet acknowledged by Kafka (group kafka-bridge: undelivered + pending; absent while Redis cannot tell the undelivered)",
    ["direction"],
)


@cache
def records(direction: str, outcome: str) -> Counter:
    return RECORDS.labels(direction=direction, outcome=outcome)


def lag(direction: str) -> Gauge:
    """Not cached: a child removed by :func:`lag_unknown` must be made again to be exported."""
    return LAG.labels(direction=direction)


def lag_unknown(direction: str) -> None:
    """Leave the series out of the exposition (an unknown lag is no sample, never a 0)."""
    with suppress(KeyError):  # prometheus-client before 0.21 raises for a series not there
        LAG.remove(direction)
