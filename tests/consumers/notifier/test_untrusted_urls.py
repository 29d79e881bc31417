"""Webhook URLs from raw result writers: no length cap upstream, and they may not parse; neither may cost memory or leak."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import orjson
import pytest
from redis.asyncio import Redis
from standardwebhooks import Webhook

from consumers.notifier.dead import list_webhook_dead
from consumers.notifier.delivery import Deliverer, Kind
from consumers.notifier.handler import loggable
from consumers.notifier.signing import Signer
from consumers.notifier.ssrf import MAX_URL_CHARS, SsrfGuard, parse_url
from streams.groups import ensure_groups, standard_groups
from streams.keys import Keys
from tests.consumers.notifier.conftest import NotifierFactory, add_result, make_secret
from tests.consumers.notifier.receiver import Receiver
from tests.hostile import Start, started_peers
from tests.support import wait_until

FAST = ("--backoff", "0.05", "--lease", "2")
UNPARSEABLE = "https://admin:hunter2@hooks.example.com:8443x/hook?token=SECRET-TOKEN"


def padded(url: str, length: int) -> str:
    """``url`` with a query padded to ``length`` characters."""
    return url + "?pad=" + "a" * (length - len(url) - 5)


async def test_a_url_over_the_limit_is_refused_before_it_is_parsed_or_cached(receiver: Receiver) -> None:
    # Given a deliverer allowed to reach the loopback receiver
    deliverer = Deliverer(signer=Signer([make_secret()]), guard=SsrfGuard(allow_private=True), concurrency=4,
                          per_endpoint=2, connect_timeout_s=2, timeout_s=5, retry_after_cap_s=60)
    misses = parse_url.cache_info().misses
    try:
        # When a URL one character over the limit is delivered
        over = await deliverer.deliver(padded(receiver.url("/long"), MAX_URL_CHARS + 1), "job-long", b"{}")
        # Then it is refused with the reason, never sent, and never parsed (so never kept in a cache)
        assert over.kind is Kind.REFUSED, over
        assert over.error == f"URL too long: {MAX_URL_CHARS + 1:,} characters, the limit is {MAX_URL_CHARS:,}"
        assert receiver.count() == 0 and parse_url.cache_info().misses == misses
        # And a URL at the limit is delivered
        assert (await deliverer.deliver(padded(receiver.url("/long"), MAX_URL_CHARS), "job-ok", b"{}")).kind is Kind.DELIVERED
    finally:
        await deliverer.aclose()


def test_a_logged_url_never_shows_credentials_or_query_even_when_it_does_not_parse() -> None:
    assert loggable("https://u:pw@hooks.example.com:8443/hook?token=t") == "https://hooks.example.com:8443/hook"
    for url in (UNPARSEABLE, "http://admin:hunter2@[::1/hook?token=SECRET-TOKEN", padded(UNPARSEABLE, MAX_URL_CHARS + 1)):
        shown = loggable(url)
        assert "hunter2" not in shown and "SECRET-TOKEN" not in shown and len(shown) < 100, shown
    assert loggable(padded(UNPARSEABLE, 900_000)) == "(URL of 900,000 characters)"


async def test_an_overlong_or_unparseable_url_is_dead_lettered_with_its_reason_and_never_logged(
    redis: Redis, keys: Keys, notifiers: NotifierFactory, receiver: Receiver
) -> None:
    # Given a notifier, and raw results whose webhook is 900 KB long, or carries credentials but does not parse
    child = notifiers.start(*FAST)
    huge = padded(receiver.url("/huge") + "?token=SECRET-TOKEN&", 900_000)
    await add_result(redis, keys, "job-huge", huge)
    await add_result(redis, keys, "job-unparseable", UNPARSEABLE)

    async def two_letters() -> bool:
        return int(await redis.xlen(keys.webhooks_dead)) == 2

    # When the notifier reads them, each is dead-lettered at once, unattempted, with a clear reason
    await wait_until(two_letters, timeout=10, what="two webhook dead letters")
    letters = {letter.id: letter for letter in await list_webhook_dead(redis, keys)}
    assert letters["job-huge"].error == f"URL too long: 900,000 characters, the limit is {MAX_URL_CHARS:,}"
    assert letters["job-huge"].url == huge and letters["job-huge"].attempts == 0
    assert letters["job-huge"].event["id"] == "job-huge"
    assert letters["job-unparseable"].error.startswith("invalid URL") and letters["job-unparseable"].attempts == 0
    assert receiver.count() == 0
    # Then the log names both refusals without a URL's credentials, query or bulk
    await wait_until(lambda: child.log_text().count("outcome=refused") == 2, timeout=5, what="two refused lines")
    text = child.log_text()
    assert "url=(URL of 900,000 characters)" in text and "url=(unparseable URL)" in text
    for secret in ("hunter2", "SECRET-TOKEN", "aaaaaaaaaa"):
        assert secret not in text, f"{secret!r} in the notifier log"


async def test_a_raw_result_that_is_not_utf8_is_delivered_repaired_and_never_blocks_the_results_after_it(
    redis: Redis, keys: Keys, notifiers: NotifierFactory, receiver: Receiver, redis_url: str
) -> None:
    # Given a notifier, and raw results XADDed with bytes that are not UTF-8 (in the id, the result, a field
    # name, the webhook URL), then a good result behind them
    notifiers.start(*FAST)
    await ensure_groups(redis, standard_groups(keys))
    raw = Redis.from_url(redis_url)  # bytes as given, no decoding
    url = receiver.url("/bad").encode()
    try:
        for fields in ({b"id": b"bad-\xff", b"agent": b"echo", b"status": b"completed", b"webhook": url},
                       {b"id": b"bad-result", b"status": b"failed", b"error": b"\xfe", b"webhook": url},
                       {b"id": b"bad-name", b"\xff": b"x", b"webhook": url},
                       {b"id": b"bad-url", b"webhook": b"http://\xff.example/x"}):
            await raw.xadd(keys.results, fields)
    finally:
        await raw.aclose()
    await add_result(redis, keys, "job-good", receiver.url("/good"))
    # When the notifier reads them, the good result behind them is delivered (before: one TypeError in orjson
    # failed the whole read, the reclaim sweep failed on it again, and nothing after it was ever sent)
    await wait_until(lambda: receiver.count("/good") == 1 and receiver.count("/bad") == 3, timeout=10, what="every delivery")
    # Then each bad one went out as JSON with U+FFFD in place of the bytes, signed, with a valid webhook-id
    got = {Webhook(notifiers.secret).verify(r.body, r.headers)["id"]: r for r in receiver.on("/bad")}
    assert set(got) == {"bad-\ufffd", "bad-result", "bad-name"}
    assert got["bad-\ufffd"].headers["webhook-id"] == "bad-%EF%BF%BD"
    assert orjson.loads(got["bad-result"].body)["error"] == "\ufffd"
    # And the URL that is not UTF-8 is dead-lettered with its reason, never attempted
    await wait_until(lambda: _one(redis.xlen(keys.webhooks_dead)), timeout=10, what="the bad URL dead-lettered")
    (letter,) = await list_webhook_dead(redis, keys)
    assert (letter.id, letter.attempts) == ("bad-url", 0) and letter.error.startswith("invalid URL"), letter


async def _one(awaitable: Awaitable[int]) -> bool:
    return int(await awaitable) == 1


async def test_a_raw_result_with_an_integer_json_cannot_carry_is_delivered_as_written_and_never_blocks(
    redis: Redis, keys: Keys, notifiers: NotifierFactory, receiver: Receiver
) -> None:
    # Given a notifier, a raw result whose finished_at is valid for the model but past 64 bits, and a good one behind it
    notifiers.start(*FAST)
    await ensure_groups(redis, standard_groups(keys))
    huge = "9" * 30
    await redis.xadd(keys.results, {"id": "job-huge-int", "agent": "echo", "status": "completed", "attempts": "1",
                                    "submitted_at": "1", "started_at": "1", "finished_at": huge, "worker": "w",
                                    "webhook": receiver.url("/huge")})
    await add_result(redis, keys, "job-good", receiver.url("/good"))
    # When the notifier reads them, both are delivered (before: orjson's "Integer exceeds 64-bit range" failed the
    # whole read, again at every reclaim, and the good result was never sent)
    await wait_until(lambda: receiver.count("/good") == 1 and receiver.count("/huge") == 1, timeout=10, what="both deliveries")
    # Then the malformed one went out as written, its fields as strings, signed
    (got,) = receiver.on("/huge")
    event = Webhook(notifiers.secret).verify(got.body, got.headers)
    assert (event["id"], event["finished_at"]) == ("job-huge-int", huge)


peer = pytest.fixture(started_peers, name="peer")


async def test_a_redirect_to_bytes_that_are_not_utf8_is_retried_then_dead_lettered_never_stuck(
    redis: Redis, keys: Keys, notifiers: NotifierFactory, peer: Start, receiver: Receiver
) -> None:
    # Given a receiver answering 302 with a Location header holding a byte that is not UTF-8, and a notifier that tries
    # twice and holds 2 deliveries at once
    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        writer.write(b"HTTP/1.1 302 Found\r\nlocation: /moved-\xff\r\ncontent-length: 0\r\n\r\n")
        await writer.drain()
        return True

    hostile = await peer(answer)
    notifiers.start(*FAST, "--max-attempts", "2", "--concurrency", "2")
    for i in range(3):
        await add_result(redis, keys, f"job-moved-{i}", hostile.url + f"/hook-{i}")
    await add_result(redis, keys, "job-good", receiver.url("/good"))

    # When the notifier delivers them: each 302 is retried once, then dead-lettered (the first attempt's retry
    # raised writing the header into the retry's record: the delivery held its slot for good, never tried again or
    # dead-lettered, and two such held every slot, so the good result behind them was never delivered)
    async def all_dead() -> bool:
        return int(await redis.xlen(keys.webhooks_dead)) == 3

    await wait_until(all_dead, timeout=15, what="three webhook dead letters")
    await wait_until(lambda: receiver.count("/good") == 1, timeout=10, what="the good delivery")
    # Then each letter names the redirect, the byte shown replaced
    for letter in await list_webhook_dead(redis, keys):
        assert letter.attempts == 2 and letter.last_status == 302, letter
        assert "redirect to http://127.0.0.1:" in letter.error and "/moved-\ufffd" in letter.error, letter.error
    assert hostile.requests == 6
