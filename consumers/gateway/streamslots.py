"""How many event streams each caller holds open in this gateway process.

Every open stream polls Redis on its own, so a caller with thousands of them slows every other caller's
requests. The count is in-process: N replicas behind a load balancer let one caller hold up to N times the cap.
"""

from __future__ import annotations

from collections import Counter

from consumers.gateway.metrics import EVENT_STREAMS


class StreamSlots:
    """At most ``per_caller`` open streams per rate-limit bucket (an API key, or a client address without keys);
    0 = no cap. Not thread-safe: the gateway's event loop is its only user."""

    def __init__(self, per_caller: int) -> None:
        self.per_caller = per_caller
        self._open: Counter[str] = Counter()

    def take(self, bucket: str) -> bool:
        """Count one more stream for ``bucket``; False (and nothing counted) when it already holds the cap."""
        if self.per_caller and self._open[bucket] >= self.per_caller:
            return False
        self._open[bucket] += 1
        EVENT_STREAMS.inc()
        return True

    def give_back(self, bucket: str) -> None:
        EVENT_STREAMS.dec()
        self._open[bucket] -= 1
        if self._open[bucket] <= 0:  # no entry kept per caller once idle
            del self._open[bucket]
