"""Notifier pieces without processes: SSRF guard, signatures, Retry-After, settings, connect-time pinning."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import ipaddress
import json
import time
from pathlib import Path

import aiohttp
import orjson
import pytest
import typer
from pydantic import ValidationError
from standardwebhooks import Webhook

from consumers.cli_base import build
from consumers.notifier.delivery import Deliverer, Kind
from consumers.notifier.handler import event_json, targets
from consumers.notifier.limiter import Busy, EndpointLimiter, EndpointQueue
from consumers.notifier.settings import NotifierSettings, Subscription
from consumers.notifier.signing import Signer
from consumers.notifier.ssrf import Refused, SsrfGuard, classify
from tests.consumers.notifier.conftest import make_secret
from streams.retry_after import parse_retry_after
from tests.consumers.notifier.receiver import Receiver
from tests.hostile import HostilePeer, response

REFUSED_URLS = [
    "http://127.0.0.1/", "http://127.1/", "http://2130706433/", "http://0x7f.1/", "http://017700000001/",
    "http://0.0.0.0/", "http://0/", "http://10.1.2.3/", "http://172.16.0.1/", "http://192.168.1.1/",
    "http://100.64.0.1/", "http://169.254.169.254/latest/meta-data", "http://169.254.1.1/",
    "http://224.0.0.1/", "http://240.0.0.1/", "http://255.255.255.255/", "http://localhost/",
    "http://[::1]/", "http://[::]/", "http://[fe80::1]/", "http://[fc00::1]/", "http://[fd00:ec2::254]/",
    "http://[ff02::1]/", "http://[::ffff:127.0.0.1]/", "http://[::ffff:a00:1]/", "http://[::ffff:169.254.169.254]/",
    "http://[2002:7f00:1::]/", "http://[64:ff9b::a9fe:a9fe]/", "http://[::127.0.0.1]/",
    "https://127.0.0.1:8443/x", "http://100.100.100.200/", "http://168.63.129.16/",
    "http://[fec0::1]/", "http://[fefe::1]/", "http://169.254.170.23/", "http://[fd00:ec2::23]/",
]


@pytest.mark.parametrize("url", REFUSED_URLS)
async def test_non_public_targets_are_refused(url: str) -> None:
    with pytest.raises(Refused, match="refused: .* not a public address"):
        await SsrfGuard().check(url)


@pytest.mark.parametrize("url", ["ftp://example.com/", "file:///etc/passwd", "gopher://x/", "//example.com/", "not a url"])
async def test_only_http_and_https_are_allowed(url: str) -> None:
    with pytest.raises(Refused):
        await SsrfGuard().check(url)


async def test_public_addresses_pass() -> None:
    guard = SsrfGuard()
    for url in ("http://8.8.8.8/hook", "https://1.1.1.1:8443/", "http://[2606:4700:4700::1111]/"):
        assert (await guard.check(url)).host


@pytest.mark.parametrize("address", ["169.254.0.23", "169.254.42.42", "[fd20:ce::254]", "[fd00:42::42]", "[fe80::a9fe:a9fe]"])
async def test_allow_private_keeps_every_clouds_metadata_refused(address: str) -> None:
    # Tencent, Scaleway (v4 and v6), GCP's IPv6 and OpenStack's IPv6 metadata servers, as AWS's
    with pytest.raises(Refused, match="cloud-metadata"):
        await SsrfGuard(allow_private=True).check(f"http://{address}/")


@pytest.mark.parametrize("host", ["a..b", "exa%20mple.com", "a" * 64 + ".com", ".example.com", "-a.example.com", "a-.example.com"])
async def test_a_host_no_resolver_takes_is_refused_at_once(host: str) -> None:
    # refused (dead-lettered with the reason), not resolved, failed and retried for the attempts' minutes
    with pytest.raises(Refused, match="not a valid name"):
        await SsrfGuard(allow_private=True).check(f"http://{host}/hook")


async def test_an_idn_host_is_checked_in_the_ascii_form_the_connection_uses() -> None:
    # an emoji name has no IDNA 2008 form to encode again, so checked as Unicode it could never resolve
    assert SsrfGuard.parse("https://\U0001f4a9.la/hook").host == "xn--ls8h.la"
    assert SsrfGuard.parse("https://B\u00fccher.de./hook").host == "xn--bcher-kva.de"
    listed = SsrfGuard(allow_list=[".b\u00fccher.de"])  # allow-list names are not resolved
    await listed.check("http://hooks.b\u00fccher.de/")


async def test_allow_private_keeps_metadata_refused_unless_allow_listed() -> None:
    guard = SsrfGuard(allow_private=True)
    await guard.check("http://127.0.0.1:9/")
    await guard.check("http://10.0.0.1/")
    with pytest.raises(Refused, match="cloud-metadata"):
        await guard.check("http://169.254.169.254/")
    listed = SsrfGuard(allow_list=["169.254.169.254", "10.0.0.0/8", ".internal.example", "localhost"])
    await listed.check("http://169.254.169.254/")
    await listed.check("http://10.9.9.9/")
    await listed.check("http://hooks.internal.example/")  # allow-listed names are not resolved
    await listed.check("http://localhost:1/")
    with pytest.raises(Refused):
        await listed.check("http://192.168.0.1/")


def test_classify_names_the_range() -> None:
    assert classify(ipaddress.ip_address("127.0.0.1")) == "loopback"
    assert classify(ipaddress.ip_address("::ffff:10.0.0.1")) == "private (IPv4 10.0.0.1 embedded)"
    assert classify(ipaddress.ip_address("93.184.216.34")) is None


async def test_the_connection_is_checked_again_at_connect() -> None:
    # Given a client whose pre-check is skipped (as if DNS changed after it): the socket layer still refuses
    receiver = Receiver().start()
    deliverer = Deliverer(signer=Signer([]), guard=SsrfGuard(), concurrency=4, per_endpoint=2,
                          connect_timeout_s=2, timeout_s=5, retry_after_cap_s=60)
    try:
        with pytest.raises(aiohttp.ClientConnectorError, match="loopback"):
            await deliverer.session.post(f"http://localhost:{receiver.port}/x", data=b"{}")
        assert receiver.count() == 0
    finally:
        await deliverer.aclose()
        receiver.stop()


async def test_deliverer_classifies_responses() -> None:
    replies = [b"HTTP/1.1 204 No Content\r\n\r\n", response(410), response(429, headers="retry-after: 7\r\n"),
               response(500, b"x" * 1000), response(429, headers="retry-after: inf\r\n")]

    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        writer.write(replies[n - 1])
        await writer.drain()
        return True

    peer = await HostilePeer(answer).start()
    deliverer = Deliverer(signer=Signer([make_secret()]), guard=SsrfGuard(allow_private=True), concurrency=4,
                          per_endpoint=2, connect_timeout_s=2, timeout_s=5, retry_after_cap_s=60)
    try:
        got = [await deliverer.deliver(peer.url + "/h", "job-1", b"{}") for _ in range(5)]
    finally:
        await deliverer.aclose()
        await peer.stop()
    assert [a.kind for a in got] == [Kind.DELIVERED, Kind.GONE, Kind.RETRY, Kind.RETRY, Kind.RETRY]
    assert got[2].retry_after_s == 7 and got[2].status == 429
    assert len(got[3].error) < 300
    assert got[4].status == 429 and got[4].retry_after_s is None  # inf is no answer: the backoff applies


def test_retry_after_forms() -> None:
    assert parse_retry_after("120", cap_s=60) == 60
    assert parse_retry_after("3", cap_s=60) == 3
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", cap_s=60, now_s=1445412470.0) == 10
    assert parse_retry_after("soon", cap_s=60) is None
    assert parse_retry_after("nan", cap_s=60) is None
    assert parse_retry_after("inf", cap_s=60) is None
    assert parse_retry_after("1e400", cap_s=60) is None
    assert parse_retry_after("1e300", cap_s=60) == 60
    assert parse_retry_after("-5", cap_s=60) == 0
    assert parse_retry_after(None, cap_s=60) is None


def test_signature_is_byte_compatible_with_the_spec() -> None:
    # Given two secrets, When a body is signed, Then each verifies and equals HMAC-SHA256 of "id.ts.body"
    secrets = [make_secret(), make_secret()]
    body = orjson.dumps({"id": "j-1", "status": "completed", "result": {"text": "héllo"}})
    headers = Signer(secrets).headers("j-1", body)
    for secret in secrets:
        assert Webhook(secret).verify(body, headers)["result"] == {"text": "héllo"}
    key = base64.b64decode(secrets[0].removeprefix("whsec_"))
    expected = base64.b64encode(hmac.new(key, f"j-1.{headers['webhook-timestamp']}.".encode() + body, hashlib.sha256).digest())
    assert headers["webhook-signature"].split(" ")[0] == "v1," + expected.decode()
    assert "webhook-signature" not in Signer([]).headers("j-1", body)


def test_settings_from_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    secret = make_secret()
    subs = tmp_path / "subs.json"
    subs.write_text('[{"url": "https://hooks.example.com/all"}, {"url": "https://x.example/f", "statuses": ["failed"]}]')
    monkeypatch.setenv("STREAMCREW_WEBHOOK_SECRET", f"{secret} {make_secret()}")
    monkeypatch.setenv("STREAMCREW_SUBSCRIPTIONS", str(subs))
    monkeypatch.setenv("STREAMCREW_ALLOW_LIST", "hooks.internal, 10.0.0.0/8")
    monkeypatch.setenv("STREAMCREW_MAX_ATTEMPTS", "4")
    settings = NotifierSettings()
    assert settings.webhook_secrets[0] == secret and len(settings.webhook_secrets) == 2
    assert secret not in repr(settings)
    assert [s.url for s in settings.subscriptions] == ["https://hooks.example.com/all", "https://x.example/f"]
    assert settings.allow_list == ["hooks.internal", "10.0.0.0/8"] and settings.max_attempts == 4
    with pytest.raises(ValidationError, match="whsec_"):
        NotifierSettings(webhook_secret="not-a-secret")
    with pytest.raises(ValidationError, match="neither a JSON list nor a file"):
        NotifierSettings(subscriptions="/nonexistent/subs.json")


def test_a_malformed_subscriptions_setting_is_described_never_quoted(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Given subscriptions holding a secret and a URL with credentials, malformed in each way an operator might
    secret, url = make_secret(), "https://ops:pw-7777@ops.example.com/all?token=tk-8888"
    as_file = tmp_path / "subs.json"
    as_file.write_bytes(orjson.dumps({"url": url, "secret": secret}))
    cases = [
        (orjson.dumps({"url": url, "secret": secret}).decode(), "invalid setting subscriptions (STREAMCREW_SUBSCRIPTIONS): subscriptions must be a JSON list of objects, got a JSON object"),
        (str(as_file), "got a JSON object"),
        (f'"{url}" {secret}', "neither a JSON list nor a file"),
        (orjson.dumps([{"url": url.replace("https", "ftp"), "secret": secret}]).decode(), "invalid setting subscriptions.0.url (STREAMCREW_SUBSCRIPTIONS): subscription url must be http:// or https://"),
        (orjson.dumps([{"url": url, "secret": "whsek_" + secret[6:]}]).decode(), "invalid setting subscriptions.0.secret (STREAMCREW_SUBSCRIPTIONS): secret 1 does not start"),
    ]
    for value, says in cases:
        monkeypatch.setenv("STREAMCREW_SUBSCRIPTIONS", value)
        # When the notifier's settings are built, as at startup
        with pytest.raises(typer.Exit):
            build(NotifierSettings)
        # Then the error says what is wrong, and quotes none of the value
        shown = " ".join(capsys.readouterr().err.split())
        assert says in shown, shown
        for leak in (secret[6:16], "pw-7777", "tk-8888", "ops.example.com"):
            assert leak not in shown, shown


def test_targets_dedupe_and_filter() -> None:
    subs = [Subscription(url="http://a/"), Subscription(url="http://b/", agents=frozenset({"order"})),
            Subscription(url="http://c/", statuses=frozenset({"failed"}))]
    raw = {"id": "1", "agent": "order", "status": "completed", "webhook": "http://a/"}
    assert targets(raw, subs) == ["http://a/", "http://b/"]
    assert targets({"id": "2", "agent": "echo", "status": "failed"}, subs) == ["http://a/", "http://c/"]


def proven(limiter: EndpointLimiter, origin: str, seconds: float = 0.01) -> EndpointQueue:
    """The queue of ``origin`` after ``per_endpoint`` deliveries to it were answered in ``seconds``: it earned its
    connections (slow start), so it is proven healthy."""
    queue = limiter.enter(origin)
    assert isinstance(queue, EndpointQueue)
    for _ in range(limiter.per_endpoint):
        limiter._start(queue)
        limiter.finished(queue, seconds)
    limiter.leave(queue)
    assert queue.connections(limiter.per_endpoint) == limiter.per_endpoint
    return queue


async def test_a_lane_sends_in_arrival_order_at_most_per_endpoint_at_once() -> None:
    # Given an endpoint queue with 2 connections that has earned them, and five deliveries arriving
    limiter = EndpointLimiter(2, pool=200, queue_wait_s=0.5)
    proven(limiter, "http://a:80")
    queues = [limiter.enter("http://a:80") for _ in range(5)]
    assert all(isinstance(queue, EndpointQueue) for queue in queues)
    queue = queues[0]
    assert isinstance(queue, EndpointQueue)
    order: list[int] = []

    async def one(n: int) -> None:
        assert await limiter.turn(queue)
        order.append(n)
        await asyncio.sleep(0)
        limiter.finished(queue, 0.01)
        limiter.leave(queue)

    tasks = [asyncio.create_task(one(n)) for n in range(5)]
    await asyncio.sleep(0)
    # Then two go at once, the rest wait their turn and go in the order they came
    assert queue.in_flight == 2 and len(queue.waiters) == 3
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2, 3, 4] and queue.held == 0 and queue.in_flight == 0


async def test_a_healthy_endpoint_alone_queues_without_limit_and_a_hung_one_is_parked() -> None:
    limiter = EndpointLimiter(10, pool=200, queue_wait_s=0.5)
    # Given a healthy endpoint that answered in 20 ms, alone: it may hold every slot (the read waits for it)
    first = limiter.enter("http://fast:80")
    assert isinstance(first, EndpointQueue)
    first.in_flight = 1
    limiter.finished(first, 0.02)
    assert all(isinstance(limiter.enter("http://fast:80"), EndpointQueue) for _ in range(300))
    # When another healthy endpoint is active, the first gets its share (and what it drains in 0.5 s), then busy
    other = limiter.enter("http://other:80")
    assert isinstance(other, EndpointQueue)
    other.in_flight = 1
    limiter.finished(other, 0.02)
    limiter.enter("http://other:80")
    busy = limiter.enter("http://fast:80")
    assert isinstance(busy, Busy) and not busy.growing and busy.wait_s > 0.5  # about when its queue has drained
    # Each one parked after it comes back one turn later (in order), and one coming back is taken past the share
    due_back = first.parked_until
    assert isinstance(limiter.enter("http://fast:80"), Busy)
    assert first.parked_until >= due_back + first.latency_s / 10 - 1e-9  # one turn after the one before, at least
    assert isinstance(limiter.enter("http://fast:80", returning=True), EndpointQueue)
    # When an endpoint hangs (its requests open for 10 s), it may queue nothing beyond its connections
    hung = limiter.enter("http://hung:80")
    assert isinstance(hung, EndpointQueue)
    for _ in range(9):
        limiter.enter("http://hung:80")
    for _ in range(10):
        limiter._start(hung)
    hung.stalled_since -= 10
    refused = limiter.enter("http://hung:80")
    assert isinstance(refused, Busy) and refused.growing and refused.wait_s >= 10
    # And its waiters are sent away at the next tick
    waiting = asyncio.ensure_future(limiter.turn(hung))
    await asyncio.sleep(0)
    assert limiter.tick() == 1
    assert await waiting is False


async def test_a_lone_endpoint_answering_in_most_of_a_second_queues_two_seconds_of_its_work() -> None:
    limiter = EndpointLimiter(10, pool=200, queue_wait_s=0.5)
    # Given an endpoint alone that answers in 0.6 s (about 17 a second with its 10 connections)
    queue = proven(limiter, "http://sluggish:80", 0.6)
    queue.latency_s = 0.6
    # Then it queues what it serves in 2 s beyond its connections (33), and the next is parked to come back later
    assert all(isinstance(limiter.enter("http://sluggish:80"), EndpointQueue) for _ in range(10 + 33))
    busy = limiter.enter("http://sluggish:80")
    assert isinstance(busy, Busy) and not busy.growing and "more than it serves in 2s" in busy.reason and busy.wait_s > 2
    # While a fast one alone (20 ms: 1,000 in 2 s, more than the slots) still queues without limit
    fast = proven(limiter, "http://fast:80", 0.02)
    fast.latency_s = 0.02
    assert limiter.room(fast, time.monotonic()) is None


async def test_an_endpoint_gets_one_connection_until_it_answers() -> None:
    # Given a new endpoint with three deliveries
    limiter = EndpointLimiter(10, pool=200, queue_wait_s=0.5)
    queue = limiter.enter("http://new:80")
    assert isinstance(queue, EndpointQueue)
    limiter.enter("http://new:80")
    limiter.enter("http://new:80")
    first = asyncio.ensure_future(limiter.turn(queue))
    rest = [asyncio.ensure_future(limiter.turn(queue)) for _ in range(2)]
    await asyncio.sleep(0)
    # Then one goes, the others wait for its answer; once it answered, both go at once
    assert await first and queue.in_flight == 1 and len(queue.waiters) == 2
    limiter.finished(queue, 0.01)
    assert all(await asyncio.gather(*rest)) and queue.in_flight == 2


async def test_unproven_endpoints_share_half_the_pool_and_are_parked_once_it_hangs() -> None:
    # Given a pool of 20 (a budget of 10 for endpoints not proven healthy) and one proven fast endpoint
    limiter = EndpointLimiter(10, pool=20, queue_wait_s=0.5)
    fast = proven(limiter, "http://fast:80")
    # When 12 new endpoints get a delivery each
    queues = [limiter.enter(f"http://new-{i}:80") for i in range(12)]
    turns = [asyncio.ensure_future(limiter.turn(q)) for q in queues if isinstance(q, EndpointQueue)]
    await asyncio.sleep(0)
    # Then 10 are in flight and 2 wait for room, not parked; the proven endpoint still goes at once
    assert sum(t.done() for t in turns) == 10 and len(turns) == 12
    assert await limiter.turn(fast)
    limiter.finished(fast, 0.01)
    # And when one of the ten answers, the first waiting one goes
    started = [q for q, t in zip(queues, turns) if t.done()]
    limiter.finished(started[0], 0.01)  # type: ignore[arg-type]
    await asyncio.sleep(0)
    assert sum(t.done() for t in turns) == 11
    # When the nine others stall past a second, the next tick parks the one still waiting, and new ones at once
    for q in started[1:]:
        q.stalled_since -= 5  # type: ignore[union-attr]
    assert limiter.tick() == 1 and await turns[11] is False
    refused = limiter.enter("http://new-12:80")
    assert isinstance(refused, Busy) and refused.growing and "not proven healthy" in refused.reason
    # While a proven healthy endpoint is still taken
    assert isinstance(limiter.enter("http://fast:80"), EndpointQueue)


def answer_once(limiter: EndpointLimiter, origin: str) -> EndpointQueue:
    queue = limiter.enter(origin)
    assert isinstance(queue, EndpointQueue)
    limiter._start(queue)
    limiter.finished(queue, 0.01)
    limiter.leave(queue)
    return queue


async def test_origins_that_answer_once_then_hang_hold_half_the_slots_at_most() -> None:
    # Given the notifier's defaults (200 slots, 10 per endpoint), a proven endpoint, and 25 origins (one receiver)
    # that have each answered one delivery fast
    limiter = EndpointLimiter(10, pool=200, queue_wait_s=0.5)
    good = proven(limiter, "http://good:80")
    hostile = [answer_once(limiter, f"http://hostile-{i}:80") for i in range(25)]
    # When each gets 11 deliveries, and those started hang
    turns = []
    for queue in hostile:
        for _ in range(11):
            assert limiter.enter(queue.origin) is queue
            turns.append(asyncio.ensure_future(limiter.turn(queue)))
    await asyncio.sleep(0)
    # Then they hold at most half the slots: one answer bought each two connections, counted in the budget of
    # endpoints not proven healthy (before, ten each outside it: 250, more than every slot)
    hung = sum(q.in_flight for q in hostile)
    assert hung <= limiter.pool // 2, f"{hung} deliveries to origins that answered once are in flight"
    # And once they stall past a second, their waiting deliveries are parked, while the proven endpoint's
    # deliveries all go at its ten connections' pace
    for queue in hostile:
        queue.stalled_since -= 5
    assert limiter.tick() == len(turns) - hung
    await asyncio.sleep(0)
    assert sum(1 for t in turns if t.done() and t.result() is False) == len(turns) - hung
    for _ in range(20):
        assert limiter.enter(good.origin) is good
    good_turns = [asyncio.ensure_future(limiter.turn(good)) for _ in range(20)]
    await asyncio.sleep(0)
    assert good.in_flight == 10 and hung + good.in_flight <= limiter.pool
    for t in good_turns[:10]:
        assert await t
        limiter.finished(good, 0.01)
    await asyncio.sleep(0)
    assert all(t.done() for t in good_turns)


async def test_a_proven_endpoint_that_stalls_counts_in_the_budget_of_endpoints_not_proven_healthy() -> None:
    # Given a budget of 10 (a pool of 20) and a proven endpoint whose ten deliveries, started while it answered fast,
    # have stalled past a second
    limiter = EndpointLimiter(10, pool=20, queue_wait_s=0.5)
    turned = proven(limiter, "http://turned:80")
    for _ in range(10):
        assert limiter.enter(turned.origin) is turned
        assert await limiter.turn(turned)
    turned.stalled_since -= 5
    # When the tick sees it slow
    limiter.tick()
    # Then its deliveries in flight fill the budget, and a new endpoint's delivery is parked, not started beside them
    assert limiter._suspect_in_flight == 10
    refused = limiter.enter("http://new:80")
    assert isinstance(refused, Busy) and refused.growing and "not proven healthy" in refused.reason
    # And as they end (timeouts), the budget is freed
    for _ in range(10):
        limiter.finished(turned, 15.0)
        limiter.leave(turned)
    assert limiter._suspect_in_flight == 0 and turned.suspect_in_flight == 0


async def start_all(limiter: EndpointLimiter, queues: list[EndpointQueue], tenant: str, each: int) -> tuple[int, list[Busy]]:
    """Enter and take a turn ``each`` times on every queue for ``tenant``: how many started, and why the others not."""
    started, refused = 0, []
    for queue in queues:
        for _ in range(each):
            entered = limiter.enter(queue.origin, tenant=tenant)
            if isinstance(entered, Busy):
                refused.append(entered)
            elif await limiter.turn(entered, tenant):
                started += 1
            else:
                refused.append(limiter.sent_away(entered, tenant))
                limiter.leave(entered)
    return started, refused


async def test_a_tenants_own_webhooks_have_at_most_its_fair_share_in_flight() -> None:
    # Given a pool of 120 (a budget of 60 for endpoints not proven healthy) and twenty proven origins of one tenant,
    # each with its 10 connections
    limiter = EndpointLimiter(10, pool=120, queue_wait_s=0.5)
    origins = [proven(limiter, f"http://mallory-{i}:80") for i in range(20)]
    # When the tenant's webhooks go out to all of them (as they would before they all hang)
    started, refused = await start_all(limiter, origins, "mallory", 10)
    # Then alone it has half that budget in flight (a share stays free for tenants not yet under way), the rest parked
    assert started == 30 and len(refused) == 170
    assert all(b.growing and "its share of the 60" in b.reason for b in refused), refused[0]
    # And another tenant still starts, up to a third of the budget once two have deliveries in flight
    alice = [proven(limiter, f"http://alice-{i}:80") for i in range(3)]
    assert (await start_all(limiter, alice, "alice", 10))[0] == 20
    # And deliveries without a tenant (subscriptions, untenanted jobs) are held to no tenant's share
    ops = proven(limiter, "http://ops:80")
    assert (await start_all(limiter, [ops], "", 10))[0] == 10
    # And as the tenant's deliveries end, its count goes, and with it its place among the tenants in flight
    for queue in origins[:3]:
        for _ in range(10):
            limiter.finished(queue, 0.01, "mallory")
            limiter.leave(queue)
    assert "mallory" not in limiter._tenant_in_flight and limiter.tenant_share("alice") == 30


async def test_a_tenant_whose_one_endpoint_answers_keeps_its_backlog_in_order_past_its_share() -> None:
    # Given a proven endpoint of a tenant, alone, and 300 of the tenant's deliveries for it at once
    limiter = EndpointLimiter(10, pool=200, queue_wait_s=0.5)
    queue = proven(limiter, "http://acme:80")
    entered = [limiter.enter(queue.origin, tenant="acme") for _ in range(300)]
    assert all(e is queue for e in entered)
    turns = [asyncio.ensure_future(limiter.turn(queue, "acme")) for _ in range(300)]
    await asyncio.sleep(0)
    # When they are answered one after another
    order: list[int] = []
    for _ in range(300):
        done = next(i for i, t in enumerate(turns) if t.done() and i not in order)
        assert turns[done].result(), "sent away"
        order.append(done)
        limiter.finished(queue, 0.01, "acme")
        limiter.leave(queue)
        await asyncio.sleep(0)
    # Then none was parked (its 10 connections are fewer than its share) and they went in arrival order
    assert order == list(range(300))


async def test_tenants_whose_receivers_all_hang_leave_room_for_another_tenants_new_endpoint() -> None:
    # Given a pool of 200 and two tenants, each with 20 proven origins, whose webhooks all go out and then hang
    limiter = EndpointLimiter(10, pool=200, queue_wait_s=0.5)
    for tenant in ("t1", "t2"):
        origins = [proven(limiter, f"http://{tenant}-{i}:80") for i in range(20)]
        await start_all(limiter, origins, tenant, 10)
        for q in origins:
            q.stalled_since -= 20
    limiter.tick()
    # Then together they hold less than the budget for endpoints not proven healthy (50 + 33 of 100)
    assert limiter._suspect_in_flight == 83, limiter._suspect_in_flight
    # And a third tenant's endpoint that never answered yet starts at once
    new = limiter.enter("http://alice:80", tenant="alice")
    assert isinstance(new, EndpointQueue) and await asyncio.wait_for(limiter.turn(new, "alice"), 1)


async def test_a_proven_endpoint_that_once_waited_for_the_budget_keeps_its_waiters() -> None:
    # Given a budget of 4 held by 4 hanging new endpoints, and a proven endpoint that turned slow for a moment,
    # so that its next delivery waited for room in the budget
    limiter = EndpointLimiter(4, pool=8, queue_wait_s=0.5)
    good = proven(limiter, "http://good:80")
    for i in range(4):
        hang = limiter.enter(f"http://hang-{i}:80")
        assert isinstance(hang, EndpointQueue) and await limiter.turn(hang)
        hang.stalled_since -= 5
    limiter.enter("http://good:80")
    assert await limiter.turn(good)
    good.stalled_since -= 2  # its one delivery in flight for 2 s: slow
    limiter.enter("http://good:80")
    waiting = asyncio.ensure_future(limiter.turn(good))
    await asyncio.sleep(0)
    assert not waiting.done()
    # When that delivery answers fast (healthy again), the waiting one goes, and more queue for its own connections
    limiter.finished(good, 0.05)
    assert await waiting
    for _ in range(6):
        limiter.enter("http://good:80")
    turns = [asyncio.ensure_future(limiter.turn(good)) for _ in range(6)]
    await asyncio.sleep(0)
    # Then while the hanging ones hold the budget, a tick sends none of the proven endpoint's waiters away
    assert limiter.tick() == 0 and not any(t.done() and not t.result() for t in turns)
    for t in turns:
        t.cancel()


def test_one_slow_answer_marks_an_endpoint_slow_and_fast_ones_bring_it_back() -> None:
    limiter = EndpointLimiter(10, pool=200, queue_wait_s=0.5)
    queue = limiter.enter("http://a:80")
    assert isinstance(queue, EndpointQueue)
    limiter._start(queue)
    limiter.finished(queue, 15.0)  # a timeout
    assert queue.slow(time.monotonic())
    for _ in range(20):
        limiter._start(queue)
        limiter.finished(queue, 0.01)
    assert not queue.slow(time.monotonic())


def test_a_webhook_body_carries_a_result_nested_deeper_than_orjson_writes_parsed() -> None:
    # Given a workflow's result event around a step output of 252 levels (past the 254 orjson and pydantic write)
    deep: object = 1
    for _ in range(252):
        deep = {"k": deep}
    result = {"steps": {"a": {"status": "completed", "result": deep}}}
    raw = {"id": "wf-deep", "agent": "workflow", "status": "completed", "attempts": "1", "result": json.dumps(result)}
    # When its webhook body is built
    body = json.loads(event_json(raw))  # orjson reads no deeper than it writes
    # Then the result is the object, as for any result (contract §7), not the stored text
    assert body["result"] == result and list(body)[:4] == ["id", "agent", "status", "result"]


def test_a_raw_result_nested_past_pythons_depth_is_delivered_as_written() -> None:
    # Given a raw XADD's result of 900 levels (orjson reads up to 1,023; neither it nor the stdlib writes that deep)
    deep = "[" * 900 + "]" * 900
    raw = {"id": "raw-deep", "agent": "echo", "status": "completed", "attempts": "1", "result": deep}
    # When its webhook body is built, it is the entry's fields as written (it raised RecursionError, out of the read)
    assert json.loads(event_json(raw))["result"] == deep
