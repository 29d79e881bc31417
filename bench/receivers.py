"""Webhook receivers for the notifier's bench and tests: aiohttp.web on loopback, with a realistic pace.

Each path family behaves like a kind of customer endpoint:

- ``/hook...`` answers 200 after ``latency_s``, at most ``limit`` requests
  being served at once (a server with that many workers): its capacity is
  ``limit / latency_s`` a second;
- ``/hang...`` never answers (the notifier's timeout ends the request).

Every answered request is recorded in arrival order with its ``webhook-id``,
and every connection a request came on is counted (keep-alive reuse);
one receiver can listen on many loopback addresses (127.0.x.y, one port), so
each address is a distinct endpoint for the notifier.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field

from aiohttp import web


@dataclass(frozen=True, slots=True)
class Arrival:
    webhook_id: str
    host: str
    path: str
    at: float  # time.perf_counter() when answered


@dataclass
class PacedReceiver:
    latency_s: float = 0.0
    limit: int | None = None
    arrivals: list[Arrival] = field(default_factory=list)
    hanging: int = 0  # /hang requests open right now
    hung_total: int = 0
    most_hanging: int = 0  # the most /hang requests open at once
    port: int = 0
    peers: set[tuple[str, int]] = field(default_factory=set)  # (address, port) of each client connection seen
    _runner: web.AppRunner | None = None
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _released: asyncio.Event = field(default_factory=asyncio.Event)

    async def start(self, hosts: list[str] | None = None) -> PacedReceiver:
        app = web.Application()
        app.router.add_post("/{path:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=1.0)
        await self._runner.setup()
        self._workers = asyncio.Semaphore(self.limit) if self.limit else None
        for host in hosts or ["127.0.0.1"]:
            site = web.TCPSite(self._runner, host, self.port, backlog=4096, reuse_address=True)
            await site.start()
            if not self.port:
                self.port = int(self._runner.addresses[0][1])
        return self

    async def stop(self) -> None:
        self._released.set()
        if self._runner is not None:
            await self._runner.cleanup()

    def url(self, path: str = "/hook", host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    async def _handle(self, request: web.Request) -> web.Response:
        await request.read()
        if request.transport is not None and (peer := request.transport.get_extra_info("peername")):
            self.peers.add((peer[0], peer[1]))
        if request.path.startswith("/hang"):
            self.hanging += 1
            self.hung_total += 1
            self.most_hanging = max(self.most_hanging, self.hanging)
            try:
                await self._released.wait()  # the notifier's timeout closes the connection, which cancels this
            finally:
                self.hanging -= 1
        if self._workers is not None:
            async with self._workers:
                await asyncio.sleep(self.latency_s)
        elif self.latency_s:
            await asyncio.sleep(self.latency_s)
        self.arrivals.append(Arrival(request.headers.get("webhook-id", ""), request.host.rsplit(":", 1)[0], request.path,
                                     time.perf_counter()))
        self._changed.set()
        return web.Response(status=200)

    @property
    def connections(self) -> int:
        """How many client connections requests came on (fewer than requests: connections were reused)."""
        return len(self.peers)

    def ids(self, prefix: str = "") -> list[str]:
        return [a.webhook_id for a in self.arrivals if a.path.startswith(prefix)]

    def duplicates(self) -> dict[str, int]:
        return {i: n for i, n in Counter(a.webhook_id for a in self.arrivals).items() if n > 1}

    async def wait_for(self, count: int, *, prefix: str = "", timeout: float) -> None:
        """Until ``count`` distinct ids arrived on paths starting with ``prefix``; TimeoutError after ``timeout``.

        Each wake looks only at the arrivals since the last one: rebuilding the whole set every time was quadratic and,
        at 30,000 deliveries, took more CPU than the notifier it measured (the two share the machine's cores)."""
        seen: set[str] = set()
        looked = 0
        async with asyncio.timeout(timeout):
            while True:
                new, looked = self.arrivals[looked:], len(self.arrivals)
                seen.update(a.webhook_id for a in new if a.path.startswith(prefix))
                if len(seen) >= count:
                    return
                self._changed.clear()
                await self._changed.wait()


def displacement(ids: list[str], order: dict[str, int]) -> int:
    """How far out of order the arrivals were: the largest gap between an arrival's place and its result's rank."""
    ranks = [order[i] for i in dict.fromkeys(ids) if i in order]
    by_rank = {r: place for place, r in enumerate(sorted(ranks))}
    return max((abs(place - by_rank[r]) for place, r in enumerate(ranks)), default=0)
