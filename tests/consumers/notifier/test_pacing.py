"""Deliveries at each endpoint's pace, through a real notifier process and aiohttp receivers with a fixed latency.

The figures (time against the ideal, the hung-endpoint ratio, deliveries a
second) are measured by ``bench/bench_notifier.py``; these tests hold the
structure: no parking of a healthy endpoint, result order, a hung endpoint
confined to its own connections, nothing lost or re-sent beyond what was in
flight.
"""

from __future__ import annotations

import re
import time
from collections import Counter

import pytest
from redis.asyncio import Redis

from bench.receivers import PacedReceiver, displacement
from consumers.notifier.app import REFILL_FRACTION
from consumers.notifier.dead import list_webhook_dead
from streams.envelope import JobResult, Status, now_ms
from streams.groups import ensure_groups, standard_groups
from streams.keys import Keys
from tests.consumers.notifier.conftest import NotifierFactory, pending
from tests.support import wait_until

PER_ENDPOINT = 10  # the notifier's default
HELD = 200 // REFILL_FRACTION  # at its default concurrency: settled entries whose commit may wait for a batch


async def add_results(redis: Redis, keys: Keys, hooks: list[str], *, prefix: str = "job", tenant: str | None = None) -> dict[str, int]:
    """XADD one result per hook URL, in one pipeline per thousand; returns each job id's place in the stream."""
    await ensure_groups(redis, standard_groups(keys))
    t = now_ms()
    order: dict[str, int] = {}
    for start in range(0, len(hooks), 1000):
        async with redis.pipeline(transaction=False) as pipe:
            for n in range(start, min(start + 1000, len(hooks))):
                order[f"{prefix}-{n}"] = n
                pipe.xadd(keys.results, JobResult(id=f"{prefix}-{n}", agent="echo", status=Status.COMPLETED, result={"n": n},
                                                  attempts=1, submitted_at=t, started_at=t, finished_at=t, worker="test",
                                                  webhook=hooks[n], tenant=tenant).to_fields())
            await pipe.execute()
    return order


def busy_parks(log_text: str) -> int:
    """Deliveries parked as busy, from the notifier's summary lines (the last one is written at stop)."""
    return sum(int(n) for n in re.findall(r" busy=(\d+)", log_text))


@pytest.mark.parametrize(("latency_s", "workers"), [(0.005, 4), (0.020, 10)])
async def test_one_endpoint_gets_its_backlog_at_its_pace_in_order_without_parking(
    redis: Redis, keys: Keys, notifiers: NotifierFactory, latency_s: float, workers: int
) -> None:
    # Given a backlog of 1,000 results for one endpoint that serves `workers` requests at a time in `latency_s`
    receiver = await PacedReceiver(latency_s=latency_s, limit=workers).start()
    try:
        order = await add_results(redis, keys, [receiver.url()] * 1000)
        # When one notifier at its defaults delivers them
        notifier = notifiers.start()
        await receiver.wait_for(1000, timeout=60)
        notifier.terminate()
        assert notifier.wait(20) == 0
        # Then each arrived once, close to result order, and the endpoint was waited for, not parked and re-parked
        ids = receiver.ids()
        assert len(ids) == 1000 and not receiver.duplicates()
        assert displacement(ids, order) <= 2 * PER_ENDPOINT, displacement(ids, order)
        assert busy_parks(notifier.log_text()) <= 5, notifier.log_text()[-2000:]
        assert await pending(redis, keys) == 0
    finally:
        await receiver.stop()


async def redis_calls(redis: Redis) -> int:
    """Round trips the notifier made so far: reads and scripts (commits, promotions, renewals), from INFO commandstats."""
    stats = await redis.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in ("xreadgroup", "evalsha"))


async def test_a_bottleneck_endpoints_deliveries_share_reads_and_commits(redis: Redis, keys: Keys, notifiers: NotifierFactory) -> None:
    # Given a backlog of 1,000 results for one endpoint that serves 4 requests at a time in 5 ms (800/s)
    receiver = await PacedReceiver(latency_s=0.005, limit=4).start()
    try:
        await add_results(redis, keys, [receiver.url()] * 1000)
        # When one notifier at its defaults delivers them, one answer at a time
        notifier = notifiers.start()
        before = await redis_calls(redis)
        await receiver.wait_for(1000, timeout=60)
        calls = await redis_calls(redis) - before
        notifier.terminate()
        assert notifier.wait(20) == 0
        # Then the reads and commits each served several deliveries (one of each per delivery would be 2,000)
        assert calls <= 400, f"{calls} Redis calls for 1,000 deliveries"
        assert await pending(redis, keys) == 0
    finally:
        await receiver.stop()


async def test_a_hung_endpoint_keeps_to_its_connections_and_dead_letters_while_a_fast_one_flows(
    redis: Redis, keys: Keys, notifiers: NotifierFactory
) -> None:
    # Given a 5 ms endpoint and, on another address, one that never answers (attempts end at a 2 s timeout)
    receiver = await PacedReceiver(latency_s=0.005).start(["127.0.0.1", "127.0.0.2"])
    try:
        hooks = [receiver.url("/hang", "127.0.0.2") if n % 20 == 19 else receiver.url("/hook") for n in range(300)]
        await add_results(redis, keys, hooks)
        hung = {f"job-{n}" for n in range(300) if n % 20 == 19}
        notifier = notifiers.start("--max-attempts", "2", "--backoff", "0.2", "--log-level", "debug",
                                   env={"STREAMCREW_TIMEOUT_S": "2"})
        # When the notifier works through both, the fast endpoint gets all of its deliveries, none parked
        await receiver.wait_for(300 - len(hung), prefix="/hook", timeout=60)
        fast_parked = [line for line in notifier.log_text().splitlines() if "outcome=busy" in line and "127.0.0.1" in line]
        assert fast_parked == []
        # And the hung endpoint's deliveries go through their attempts into the dead letters, as before
        await wait_until(lambda: _eq(redis.xlen(keys.webhooks_dead), len(hung)), timeout=90, what="the hung deliveries' dead letters")
        letters = await list_webhook_dead(redis, keys)
        assert {d.id for d in letters} == hung
        assert all(d.attempts == 2 and "timeout" in d.error for d in letters), letters[0]
        # Never holding more than its own connections open
        assert receiver.most_hanging <= PER_ENDPOINT
        await wait_until(lambda: _eq(pending(redis, keys), 0), timeout=10, what="every entry acked")
    finally:
        await receiver.stop()


async def test_a_receiver_hanging_on_many_origins_holds_half_the_slots_at_most(
    redis: Redis, keys: Keys, notifiers: NotifierFactory
) -> None:
    # Given a 5 ms endpoint that has earned its 10 connections (slow start), and 150 origins (loopback addresses)
    # that never answer
    hang_hosts = [f"127.0.{10 + i // 250}.{1 + i % 250}" for i in range(150)]
    receiver = await PacedReceiver(latency_s=0.005).start(["127.0.0.1", *hang_hosts])
    try:
        notifier = notifiers.start(env={"STREAMCREW_TIMEOUT_S": "30"})
        await add_results(redis, keys, [receiver.url("/hook")] * PER_ENDPOINT, prefix="proven")
        await receiver.wait_for(PER_ENDPOINT, prefix="/hook", timeout=30)
        # When results for the hanging origins (four each) come first, then 300 for the healthy endpoint
        await add_results(redis, keys, [receiver.url("/hang", hang_hosts[n % 150]) for n in range(600)], prefix="hang")
        await add_results(redis, keys, [receiver.url("/hook")] * 300, prefix="job")
        # Then the healthy endpoint gets all of them while the hanging requests are still open (before the 30 s
        # attempt timeout frees a slot): those hold at most half the notifier's 200 slots, one per origin
        await receiver.wait_for(PER_ENDPOINT + 300, prefix="/hook", timeout=20)
        assert receiver.most_hanging <= 100, receiver.most_hanging
        assert not receiver.duplicates()
        notifier.kill()
    finally:
        await receiver.stop()


async def test_origins_that_answer_once_then_hang_do_not_take_the_slots_of_a_healthy_endpoint(
    redis: Redis, keys: Keys, notifiers: NotifierFactory
) -> None:
    # Given a 5 ms endpoint that has earned its 10 connections, and 25 origins (loopback addresses, one receiver)
    # that have each answered one webhook fast
    hosts = [f"127.0.30.{1 + i}" for i in range(25)]
    receiver = await PacedReceiver(latency_s=0.005).start(["127.0.0.1", *hosts])
    try:
        notifier = notifiers.start(env={"STREAMCREW_TIMEOUT_S": "30"})
        await add_results(redis, keys, [receiver.url("/hook")] * PER_ENDPOINT + [receiver.url("/hook", h) for h in hosts],
                          prefix="proven")
        await receiver.wait_for(PER_ENDPOINT + len(hosts), prefix="/hook", timeout=30)
        # When each of those origins gets 11 results whose webhooks hang, then the healthy endpoint 20
        await add_results(redis, keys, [receiver.url("/hang", hosts[n % len(hosts)]) for n in range(11 * len(hosts))], prefix="hang")
        await add_results(redis, keys, [receiver.url("/hook")] * 20, prefix="job")
        # Then the healthy endpoint gets them while the hanging requests are still open (before the 30 s attempt
        # timeout frees a slot): those hold at most half the 200 slots (before, one answer bought each origin its 10
        # connections: every slot hung, and the healthy endpoint's webhooks waited for the timeout)
        try:
            await receiver.wait_for(PER_ENDPOINT + len(hosts) + 20, prefix="/hook", timeout=20)
        except TimeoutError:
            pytest.fail(f"the healthy endpoint's 20 webhooks waited past 20 s: {receiver.most_hanging} requests hung at once")
        assert receiver.most_hanging <= 100, receiver.most_hanging
        assert not receiver.duplicates()
        notifier.kill()
    finally:
        await receiver.stop()


async def test_a_tenants_origins_that_earn_their_connections_then_hang_leave_other_tenants_room(
    redis: Redis, keys: Keys, notifiers: NotifierFactory
) -> None:
    # Given one tenant's 25 origins (loopback addresses, one receiver) that have each answered 10 webhooks fast,
    # so each has earned its 10 connections: 250 proven connections, more than the notifier's 200 slots
    hosts = [f"127.0.40.{1 + i}" for i in range(25)]
    receiver = await PacedReceiver(latency_s=0.005).start(["127.0.0.1", *hosts])
    try:
        notifier = notifiers.start(env={"STREAMCREW_TIMEOUT_S": "30"})
        await add_results(redis, keys, [receiver.url("/hook", h) for h in hosts for _ in range(PER_ENDPOINT)], prefix="proven",
                          tenant="mallory")
        await receiver.wait_for(PER_ENDPOINT * len(hosts), prefix="/hook", timeout=30)
        # When each of them gets 10 of the tenant's webhooks that hang, then another tenant's new endpoint 20
        await add_results(redis, keys, [receiver.url("/hang", h) for h in hosts for _ in range(PER_ENDPOINT)], prefix="hang",
                          tenant="mallory")
        await add_results(redis, keys, [receiver.url("/hook")] * 20, prefix="job", tenant="alice")
        # Then the other tenant's webhooks arrive while the hanging requests are still open (before the 30 s attempt
        # timeout frees a slot): the hanging tenant has its share in flight, half the 100 allowed endpoints not proven
        # healthy (before, its proven origins took every slot, and the other tenant waited for the timeout)
        try:
            await receiver.wait_for(PER_ENDPOINT * len(hosts) + 20, prefix="/hook", timeout=20)
        except TimeoutError:
            pytest.fail(f"the other tenant's 20 webhooks waited past 20 s: {receiver.most_hanging} requests hung at once")
        assert receiver.most_hanging <= 50, receiver.most_hanging
        assert not receiver.duplicates()
        notifier.kill()
    finally:
        await receiver.stop()


async def test_a_lone_endpoint_answering_just_under_a_second_does_not_hold_back_the_results_behind_it(
    redis: Redis, keys: Keys, notifiers: NotifierFactory
) -> None:
    # Given a notifier with 100 slots, an endpoint A answering in 0.6 s with 10 workers (about 17 a second), and another B
    slow = await PacedReceiver(latency_s=0.6, limit=PER_ENDPOINT).start()
    other = await PacedReceiver(latency_s=0.005).start()  # another port: another endpoint
    try:
        notifier = notifiers.start("--concurrency", "100", "--log-level", "debug")
        # When 300 results for A (about 18 s of its work) come before one for B
        order = await add_results(redis, keys, [slow.url()] * 300 + [other.url()])
        started = time.monotonic()
        # Then B's result is read and delivered at once, not after the 200 of A's it would wait for with A's queue
        # holding every slot (about 12 s)
        try:
            await other.wait_for(1, timeout=5)
        except TimeoutError:
            pytest.fail(f"B's webhook took over 5 s; A had received {len(slow.ids())} of 300")
        assert time.monotonic() - started < 5
        # And A still gets every one of its deliveries once, about in order, none dead-lettered, none of its parks
        # counted as an attempt
        await slow.wait_for(300, timeout=90)
        await wait_until(lambda: _eq(pending(redis, keys), 0), timeout=20, what="every entry acked")
        ids = slow.ids()
        assert len(ids) == 300 and not slow.duplicates(), slow.duplicates()
        # (in order but for the in-flight and for parked runs: a run parked as A's latency became known comes back,
        # in its order, after newer ones parked before it)
        ranks = [order[i] for i in ids]
        assert sum(later < earlier for earlier, later in zip(ranks, ranks[1:])) <= 2 * PER_ENDPOINT, ranks
        assert await redis.xlen(keys.webhooks_dead) == 0
        # (the receiver counts a delivery when it arrives, 0.6 s before its answer; the last ones came back from the
        # due stream, whose entries `pending` does not count: their lines are written once answered)
        await wait_until(lambda: notifier.log_text().count("outcome=delivered") >= 301, timeout=20, what="301 delivered lines")
        log_text = notifier.log_text()
        assert "outcome=busy" in log_text  # A's backlog beyond about 2 s of its work was parked, and came back
        delivered = [line for line in log_text.splitlines() if "outcome=delivered" in line]
        assert len(delivered) == 301 and all(" attempt=1 " in line for line in delivered), [
            line for line in delivered if " attempt=1 " not in line][:3]
        notifier.kill()
    finally:
        await slow.stop()
        await other.stop()


async def test_a_thousand_endpoints_each_get_theirs(redis: Redis, keys: Keys, notifiers: NotifierFactory) -> None:
    # Given 1,000 endpoints (one address each on loopback) and three results for each
    hosts = [f"127.0.{1 + i // 250}.{1 + i % 250}" for i in range(1000)]
    receiver = await PacedReceiver(latency_s=0.005).start(hosts)
    try:
        await add_results(redis, keys, [receiver.url("/hook", hosts[n % 1000]) for n in range(3000)])
        # When one notifier delivers them
        notifier = notifiers.start()
        await receiver.wait_for(3000, timeout=90)
        notifier.terminate()
        assert notifier.wait(20) == 0
        # Then every endpoint got its three, none parked
        assert Counter(a.host for a in receiver.arrivals) == dict.fromkeys(hosts, 3)
        assert busy_parks(notifier.log_text()) == 0
    finally:
        await receiver.stop()


async def test_sigkill_mid_backlog_loses_nothing_and_resends_at_most_what_was_in_flight(
    redis: Redis, keys: Keys, notifiers: NotifierFactory
) -> None:
    # Given a backlog of 1,000 results for one 20 ms endpoint, mid-way through delivery
    receiver = await PacedReceiver(latency_s=0.02, limit=10).start()
    try:
        await add_results(redis, keys, [receiver.url()] * 1000)
        first = notifiers.start("--lease", "2")
        await receiver.wait_for(300, timeout=60)
        # When the notifier is SIGKILLed and another takes over once the lease lapses
        first.kill()
        notifiers.start("--lease", "2")
        await receiver.wait_for(1000, timeout=60)
        await wait_until(lambda: _eq(pending(redis, keys), 0), timeout=20, what="every entry acked")
        # Then every result arrived, and only the few under way at the kill (or delivered, their commit waiting
        # for its batch) came twice (same webhook-id)
        assert len(set(receiver.ids())) == 1000
        resent = receiver.duplicates()
        assert len(resent) <= 2 * PER_ENDPOINT + HELD and all(n == 2 for n in resent.values()), resent
    finally:
        await receiver.stop()


async def _eq(awaitable: object, expected: int) -> bool:
    return int(await awaitable) == expected  # type: ignore[misc]
