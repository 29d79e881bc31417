"""Parked ("busy") deliveries come back on time and never as a herd: a real notifier process, aiohttp receivers.

A delivery parked for its endpoint's queue should come back when a connection of
that endpoint is free, not one latency (or a whole run of parked deliveries)
later, leaving the endpoint idle; deliveries parked for the longest wait (the
30 s cap) should come back spread out, not all at once, so the read loop is not
taken up by them while another endpoint's results wait.
"""

from __future__ import annotations

from redis.asyncio import Redis

from bench.receivers import Arrival, PacedReceiver
from streams.keys import Keys
from tests.consumers.notifier.conftest import NotifierFactory, pending
from tests.consumers.notifier.test_pacing import add_results
from tests.support import wait_until


def unused_s(arrivals: list[Arrival], latency_s: float, workers: int) -> float:
    """Connection-seconds the endpoint's ``workers`` were not serving between its first request and its last answer
    (each request was served in ``latency_s``, so it started that long before its answer)."""
    spans = sorted((a.at - latency_s, a.at) for a in arrivals)
    took = max(stop for _, stop in spans) - spans[0][0]
    return workers * took - latency_s * len(spans)


async def test_a_parked_delivery_comes_back_when_its_endpoint_has_a_free_connection(
    redis: Redis, keys: Keys, notifiers: NotifierFactory
) -> None:
    # Given a notifier with 100 slots that has measured an endpoint answering in 0.3 s with 10 workers (33 a
    # second): alone, its queue may hold what it serves in 2 s (66 beyond its 10 in flight)
    latency_s, workers, burst = 0.3, 10, 250
    receiver = await PacedReceiver(latency_s=latency_s, limit=workers).start()
    try:
        notifier = notifiers.start("--concurrency", "100")
        await add_results(redis, keys, [receiver.url()] * 40, prefix="warm")
        await receiver.wait_for(40, timeout=30)
        # When 250 results for it come at once (so 174 are parked, each to come back when a connection is free)
        receiver.arrivals.clear()
        await add_results(redis, keys, [receiver.url()] * burst)
        await receiver.wait_for(burst, timeout=60)
        # Then its workers were kept busy: the parked deliveries came back as its connections freed (give or take
        # the 0.25 s promotion tick), not a whole latency later, its connections unused meanwhile
        unused = unused_s(receiver.arrivals, latency_s, workers)
        took = receiver.arrivals[-1].at - receiver.arrivals[0].at + latency_s
        print(f"unused {unused:.2f} connection-seconds; took {took:.2f}s (ideal {burst * latency_s / workers:.2f}s)")
        assert unused < 5.0, f"its connections went unused {unused:.2f}s while parked deliveries waited to come back"
        assert not receiver.duplicates()
        await wait_until(lambda: _eq(pending(redis, keys), 0), timeout=20, what="every entry acked")
        notifier.kill()
    finally:
        await receiver.stop()


async def _eq(awaitable: object, expected: int) -> bool:
    return int(await awaitable) == expected  # type: ignore[misc]
