"""Per-endpoint admission: how many deliveries an endpoint may have in flight and waiting.

Every delivery holds one of the runtime's slots while it waits, so an endpoint
that answers slowly must not collect waiters. By Little's law an endpoint with
``per_endpoint`` connections and latency L serves ``per_endpoint / L`` a
second; it may therefore queue as many as it can serve within
``queue_wait_s``. A fast endpoint gets a long queue (no throttling of one busy
customer), a slow or hung one almost none: further deliveries are told busy
and parked in the delayed set. Latency is an EWMA of finished attempts, raised
to the age of the current stall while nothing finishes.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

INITIAL_LATENCY_S = 0.1
EWMA_WEIGHT = 0.2
MAX_TRACKED = 10_000


@dataclass(slots=True)
class Endpoint:
    sem: asyncio.Semaphore
    users: int = 0
    in_flight: int = 0
    latency_s: float = INITIAL_LATENCY_S
    stalled_since: float = field(default_factory=time.monotonic)

    def latency(self, now: float) -> float:
        stall = now - self.stalled_since if self.in_flight else 0.0
        return max(self.latency_s, stall)


class EndpointLimiter:
    """At most ``per_endpoint`` in flight per endpoint, and as many waiting as it drains in ``queue_wait_s``."""

    def __init__(self, per_endpoint: int, *, queue_wait_s: float, max_waiting: int) -> None:
        self.per_endpoint = per_endpoint
        self.queue_wait_s = queue_wait_s
        self.max_waiting = max_waiting
        self._endpoints: dict[str, Endpoint] = {}

    def allowed_waiting(self, endpoint: str) -> int:
        ep = self._endpoints.get(endpoint)
        latency = ep.latency(time.monotonic()) if ep else INITIAL_LATENCY_S
        return min(self.max_waiting, int(self.per_endpoint * self.queue_wait_s / max(latency, 1e-3)))

    def enter(self, endpoint: str) -> Endpoint | None:
        """Admit one delivery (it must call :meth:`leave`), or None when the endpoint is too far behind."""
        ep = self._endpoints.get(endpoint)
        if ep is None:
            if len(self._endpoints) >= MAX_TRACKED:
                self._forget_idle()
            ep = self._endpoints[endpoint] = Endpoint(asyncio.Semaphore(self.per_endpoint))
        if ep.users >= self.per_endpoint + self.allowed_waiting(endpoint):
            return None
        ep.users += 1
        return ep

    @staticmethod
    def started(ep: Endpoint) -> None:
        if ep.in_flight == 0:
            ep.stalled_since = time.monotonic()
        ep.in_flight += 1

    @staticmethod
    def finished(ep: Endpoint, seconds: float) -> None:
        ep.in_flight -= 1
        ep.latency_s += EWMA_WEIGHT * (seconds - ep.latency_s)
        ep.stalled_since = time.monotonic()

    @staticmethod
    def leave(ep: Endpoint) -> None:
        ep.users -= 1

    def _forget_idle(self) -> None:
        for name in [name for name, ep in self._endpoints.items() if ep.users == 0]:
            del self._endpoints[name]

    def users(self, endpoint: str) -> int:
        ep = self._endpoints.get(endpoint)
        return ep.users if ep else 0
