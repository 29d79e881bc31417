"""Notifier metrics (contract §8): webhook outcomes and latency, on the process's default registry."""

from __future__ import annotations

from enum import StrEnum
from functools import cache

from prometheus_client import Counter, Histogram

from streams import metrics as stream_metrics


class Outcome(StrEnum):
    DELIVERED = "delivered"
    RETRIED = "retried"
    FAILED = "failed"
    REFUSED = "refused"


DELIVERIES = Counter(
    "streamcrew_webhook_deliveries_total",
    "Webhook delivery outcomes: delivered (2xx), retried (scheduled again), failed (exhausted or 410), refused (SSRF guard)",
    ["outcome"],
)
LATENCY = Histogram(
    "streamcrew_webhook_latency_seconds", "Duration of one webhook HTTP attempt, connect to response",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30),
)


@cache
def deliveries(outcome: Outcome) -> Counter:
    return DELIVERIES.labels(outcome=str(outcome))


def reclaimed(stream_label: str) -> Counter:
    """The runtime's reclaim counter (``streamcrew_reclaimed_total``), labelled with the stream taken over."""
    return stream_metrics.reclaimed(stream_label)
