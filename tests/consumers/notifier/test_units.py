"""Notifier pieces without processes: SSRF guard, signatures, Retry-After, settings, connect-time pinning."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import ipaddress
from pathlib import Path

import aiohttp
import orjson
import pytest
from pydantic import ValidationError
from standardwebhooks import Webhook

from consumers.notifier.delivery import Deliverer, Kind
from consumers.notifier.handler import targets
from consumers.notifier.limiter import EndpointLimiter
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


def test_targets_dedupe_and_filter() -> None:
    subs = [Subscription(url="http://a/"), Subscription(url="http://b/", agents=frozenset({"order"})),
            Subscription(url="http://c/", statuses=frozenset({"failed"}))]
    raw = {"id": "1", "agent": "order", "status": "completed", "webhook": "http://a/"}
    assert targets(raw, subs) == ["http://a/", "http://b/"]
    assert targets({"id": "2", "agent": "echo", "status": "failed"}, subs) == ["http://a/", "http://c/"]


def test_endpoint_queue_follows_its_latency() -> None:
    # Given an endpoint with 10 connections and half a second of patience
    limiter = EndpointLimiter(10, queue_wait_s=0.5, max_waiting=200)
    ep = limiter.enter("http://fast:80")
    assert ep is not None
    # When it answers in 5 ms, it may queue all it drains in 0.5 s (capped by max_waiting)
    ep.latency_s = 0.005
    assert limiter.allowed_waiting("http://fast:80") == 200
    # When its requests hang for 10 s, it may queue nothing more
    limiter.started(ep)
    ep.stalled_since -= 10
    assert limiter.allowed_waiting("http://fast:80") == 0
    admitted = [limiter.enter("http://fast:80") for _ in range(12)]
    assert sum(a is not None for a in admitted) == 9  # 10 users at most: the one above and nine more
