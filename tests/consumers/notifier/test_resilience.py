"""The notifier under crashes, drains, slow endpoints and the SSRF guard."""

from __future__ import annotations

import httpx
import orjson
from redis.asyncio import Redis

from consumers.notifier.dead import list_webhook_dead
from streams.envelope import Status
from streams.keys import Keys
from tests.consumers.notifier.conftest import NotifierFactory, add_result, pending
from tests.consumers.notifier.receiver import Receiver, Reply
from tests.support import start_serving_metrics, wait_until


def ids(receiver: Receiver, path: str) -> set[str]:
    return {r.headers["webhook-id"] for r in receiver.on(path)}


async def test_sigkilled_notifier_mid_backlog_loses_no_delivery(redis: Redis, keys: Keys, notifiers: NotifierFactory) -> None:
    # Given a receiver taking ~20 ms per request, a backlog of 300 results, 10 of them to an endpoint failing once each
    receiver = Receiver(delay_s=0.02).start()
    try:
        receiver.script("/flaky", [Reply(500)] * 10)
        for n in range(300):
            await add_result(redis, keys, f"job-{n}", receiver.url("/flaky" if n % 30 == 0 else "/hook"))
        wanted = {f"job-{n}" for n in range(300)}
        first = notifiers.start("--lease", "2", "--backoff", "0.2", "--concurrency", "50",
                                env={"STREAMCREW_PER_ENDPOINT_CONCURRENCY": "4"})
        # When the notifier is SIGKILLed part-way through
        await wait_until(lambda: receiver.count() >= 40, timeout=10, what="deliveries under way")
        first.kill()
        delivered_before = ids(receiver, "/hook") | ids(receiver, "/flaky")
        assert len(delivered_before) < 300
        # Then a new notifier (after the 2 s lease) delivers every result at least once
        notifiers.start("--lease", "2", "--backoff", "0.2", env={"STREAMCREW_PER_ENDPOINT_CONCURRENCY": "20"})

        async def all_delivered() -> bool:
            flaky_ok = {r.headers["webhook-id"] for r in receiver.on("/flaky")[10:]}
            return (ids(receiver, "/hook") | flaky_ok) >= wanted - {f"job-{n}" for n in range(0, 300, 30)} and len(flaky_ok) == 10

        await wait_until(all_delivered, timeout=25, what="every result delivered after the restart")
        await wait_until(lambda: _eq(pending(redis, keys), 0), timeout=10, what="every entry acked")
        assert await redis.xlen(keys.results) == 300
        assert await list_webhook_dead(redis, keys) == []
    finally:
        receiver.stop()


async def test_sigterm_drain_hands_back_deliveries_under_way(
    redis: Redis, keys: Keys, notifiers: NotifierFactory, receiver: Receiver
) -> None:
    # Given a notifier whose five deliveries hang at an endpoint that has answered before (nine times: it earned its
    # 10 connections, so all five go at once)
    first = notifiers.start("--grace", "0.5", "--lease", "30", env={"STREAMCREW_TIMEOUT_S": "20"})
    for n in range(9):
        await add_result(redis, keys, f"job-ok{n}", receiver.url("/ok"))
    await wait_until(lambda: receiver.count("/ok") == 9, timeout=10, what="the endpoint's first nine answers")
    receiver.hold("/hang")
    for n in range(5):
        await add_result(redis, keys, f"job-h{n}", receiver.url("/hang"))
    await wait_until(lambda: receiver.count("/hang") == 5, timeout=10, what="five deliveries hanging")
    # When it is told to stop, it waits its grace, then hands them back (not after a 30 s lease)
    first.terminate()
    assert first.wait(10) == 0
    assert "0 entries finished, 5 handed back" in first.log_text()
    receiver.release("/hang")
    # Then another notifier delivers all five at once
    notifiers.start("--lease", "30")
    await wait_until(lambda: ids(receiver, "/hang") == {f"job-h{n}" for n in range(5)} and receiver.count("/hang") >= 10,
                     timeout=10, what="the handed-back deliveries")
    await wait_until(lambda: _eq(pending(redis, keys), 0), timeout=5, what="every entry acked")


async def test_a_slow_endpoint_does_not_stall_the_others(
    redis: Redis, keys: Keys, notifiers: NotifierFactory, receiver: Receiver
) -> None:
    # Given a host that hangs, another that answers, and small limits: 2 per endpoint, 10 entries at once
    receiver.hold("/slow")
    fast = Receiver().start()
    try:
        notifiers.start("--concurrency", "10", "--lease", "5",
                        env={"STREAMCREW_PER_ENDPOINT_CONCURRENCY": "2", "STREAMCREW_TIMEOUT_S": "25"})
        # When slow and fast deliveries are interleaved
        for n in range(20):
            await add_result(redis, keys, f"slow-{n}", receiver.url("/slow"))
            await add_result(redis, keys, f"fast-{n}", fast.url("/fast"))
        # Then every fast delivery arrives while the slow endpoint is still stuck with its one (it never answered:
        # one at a time until it does)
        await wait_until(lambda: len(ids(fast, "/fast")) == 20, timeout=15, what="the fast endpoint's deliveries")
        assert receiver.count("/slow") == 1
        # And once the slow endpoint recovers, it gets everything too
        receiver.release("/slow")
        await wait_until(lambda: len(ids(receiver, "/slow")) == 20, timeout=20, what="the slow endpoint's deliveries")
        await wait_until(lambda: _eq(pending(redis, keys), 0), timeout=5, what="every entry acked")
    finally:
        fast.stop()


async def test_private_targets_are_refused_never_contacted_and_dead_lettered(
    redis: Redis, keys: Keys, notifiers: NotifierFactory, receiver: Receiver
) -> None:
    # Given a notifier without --allow-private, and metrics on
    _, port = start_serving_metrics(lambda p: notifiers.start("--lease", "2", "--metrics-port", str(p), allow_private=False))
    urls = {
        "loopback": receiver.url("/a"),
        "private": f"http://10.0.0.1:{receiver.port}/b",
        "metadata": "http://169.254.169.254/latest/meta-data/",
        "ipv6-loopback": f"http://[::1]:{receiver.port}/c",
        "name": f"http://localhost:{receiver.port}/d",
        "mapped": f"http://[::ffff:127.0.0.1]:{receiver.port}/e",
        "scheme": "ftp://example.com/f",
    }
    for name, url in urls.items():
        await add_result(redis, keys, f"job-{name}", url)
    # When the notifier processes them, each is dead-lettered with the reason
    await wait_until(lambda: _eq(redis.xlen(keys.webhooks_dead), len(urls)), timeout=10, what="every target refused")
    letters = {d.id: d for d in await list_webhook_dead(redis, keys)}
    for name, url in urls.items():
        letter = letters[f"job-{name}"]
        assert letter.url == url and letter.attempts == 0 and letter.last_status is None
        assert ("refused" in letter.error) or ("scheme" in letter.error), letter.error
    assert "loopback" in letters["job-name"].error and "localhost resolves to" in letters["job-name"].error
    assert "cloud-metadata" in letters["job-metadata"].error
    assert "private" in letters["job-private"].error
    # Then the receiver was never contacted
    assert receiver.count() == 0
    await wait_until(lambda: _eq(pending(redis, keys), 0), timeout=5, what="every entry acked")
    text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
    assert f'streamcrew_webhook_deliveries_total{{outcome="refused"}} {float(len(urls))}' in text


async def test_subscriptions_receive_matching_results(
    redis: Redis, keys: Keys, notifiers: NotifierFactory, receiver: Receiver
) -> None:
    # Given subscriptions: everything, failures only, and the order agent only
    subs = [{"url": receiver.url("/all")}, {"url": receiver.url("/failed"), "statuses": ["failed"]},
            {"url": receiver.url("/orders"), "agents": ["order"]}]
    notifiers.start("--lease", "2", env={"STREAMCREW_SUBSCRIPTIONS": orjson.dumps(subs).decode()})
    # When three results land, one with its own webhook that is also a subscription
    await add_result(redis, keys, "ok-echo", receiver.url("/all"))
    await add_result(redis, keys, "bad-echo", None, status=Status.FAILED)
    await add_result(redis, keys, "ok-order", receiver.url("/own"), agent="order")
    # Then each endpoint gets what it subscribed to, each URL once per result
    await wait_until(lambda: receiver.count() == 6, timeout=10, what="six deliveries")
    assert sorted(r.headers["webhook-id"] for r in receiver.on("/all")) == ["bad-echo", "ok-echo", "ok-order"]
    assert ids(receiver, "/failed") == {"bad-echo"}
    assert ids(receiver, "/orders") == {"ok-order"}
    assert ids(receiver, "/own") == {"ok-order"}
    assert orjson.loads(receiver.on("/failed")[0].body)["error"] == "it broke"


async def _eq(awaitable: object, expected: int) -> bool:
    return int(await awaitable) == expected  # type: ignore[misc]
