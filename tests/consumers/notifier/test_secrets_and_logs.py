"""Per-tenant and per-subscription webhook secrets; URLs and ids that must not leak or crash (issue 10)."""

from __future__ import annotations

import base64
from urllib.parse import quote

import aiohttp
import orjson
import pytest
from redis.asyncio import Redis
from standardwebhooks import Webhook, WebhookVerificationError

from consumers.notifier.delivery import answer_text
from consumers.notifier.signing import Signer, header_id
from streams.keys import Keys
from tests.consumers.notifier.conftest import NotifierFactory, add_result, make_secret
from tests.consumers.notifier.receiver import Receiver, Reply
from tests.support import wait_until

FAST = ("--backoff", "0.05", "--lease", "2")


async def test_each_tenant_and_subscription_is_signed_only_with_its_own_secret(
    redis: Redis, keys: Keys, notifiers: NotifierFactory, receiver: Receiver
) -> None:
    # Given a default secret, one secret per tenant, and a subscription with its own secret
    acme, globex, sub = make_secret(), make_secret(), make_secret()
    subscriptions = [{"url": receiver.url("/sub"), "statuses": ["failed"], "secret": sub}]
    notifiers.start(*FAST, env={"STREAMCREW_WEBHOOK_TENANT_SECRETS": orjson.dumps({"acme": acme, "globex": globex}).decode(),
                                "STREAMCREW_SUBSCRIPTIONS": orjson.dumps(subscriptions).decode()})
    # When results of two tenants (and one with no tenant) land, each with its own webhook
    from streams.envelope import Status

    await add_result(redis, keys, "job-acme", receiver.url("/acme"), tenant="acme", status=Status.FAILED)
    await add_result(redis, keys, "job-globex", receiver.url("/globex"), tenant="globex")
    await add_result(redis, keys, "job-none", receiver.url("/none"))
    await wait_until(lambda: receiver.count() == 4, timeout=10, what="four deliveries")
    # Then tenant A's secret verifies A's event and nothing else, and B's secret never signs A's event
    (a,), (g,), (n,), (s,) = receiver.on("/acme"), receiver.on("/globex"), receiver.on("/none"), receiver.on("/sub")
    assert Webhook(acme).verify(a.body, a.headers)["tenant"] == "acme"
    assert Webhook(globex).verify(g.body, g.headers)["tenant"] == "globex"
    for secret, got in ((globex, a), (notifiers.secret, a), (acme, g), (notifiers.secret, g), (acme, n), (globex, n)):
        with pytest.raises(Exception, match="No matching signature"):
            Webhook(secret).verify(got.body, got.headers)
    # And the job without a tenant is signed with the default secret; the subscription with its own only
    Webhook(notifiers.secret).verify(n.body, n.headers)
    assert Webhook(sub).verify(s.body, s.headers)["id"] == "job-acme"
    for secret in (acme, notifiers.secret):
        with pytest.raises(Exception, match="No matching signature"):
            Webhook(secret).verify(s.body, s.headers)


async def test_a_subscription_without_its_own_secret_is_signed_with_the_default_one_whatever_the_tenant(
    redis: Redis, keys: Keys, notifiers: NotifierFactory, receiver: Receiver
) -> None:
    # Given a tenant with its own secret, and an operator's catch-all subscription without one
    acme = make_secret()
    notifiers.start(*FAST, env={"STREAMCREW_WEBHOOK_TENANT_SECRETS": orjson.dumps({"acme": acme}).decode(),
                                "STREAMCREW_SUBSCRIPTIONS": orjson.dumps([{"url": receiver.url("/all")}]).decode()})
    # When a result of that tenant lands, with the tenant's own webhook
    await add_result(redis, keys, "job-acme", receiver.url("/acme"), tenant="acme")
    await wait_until(lambda: receiver.count() == 2, timeout=10, what="the webhook and the subscription delivery")
    # Then the catch-all verifies it with the default secret (docs/webhooks.md), never with the tenant's
    (own,), (catch_all,) = receiver.on("/acme"), receiver.on("/all")
    assert Webhook(notifiers.secret).verify(catch_all.body, catch_all.headers)["tenant"] == "acme"
    with pytest.raises(WebhookVerificationError, match="No matching signature"):
        Webhook(acme).verify(catch_all.body, catch_all.headers)
    # And the job's own webhook is still signed with the tenant's secret only
    assert Webhook(acme).verify(own.body, own.headers)["id"] == "job-acme"
    with pytest.raises(WebhookVerificationError, match="No matching signature"):
        Webhook(notifiers.secret).verify(own.body, own.headers)


async def test_no_url_credentials_or_query_reach_the_log_and_a_non_ascii_id_is_delivered(
    redis: Redis, keys: Keys, notifiers: NotifierFactory, receiver: Receiver
) -> None:
    # Given a webhook URL with credentials and a token in its query, whose receiver fails once
    path = "/secretive?token=tok-123456"
    receiver.script(path, [Reply(500, body=b"nope")])
    child = notifiers.start(*FAST, env={"STREAMCREW_LOG_LEVEL": "debug"})
    url = f"http://bob:pa55word@127.0.0.1:{receiver.port}{path}"
    # When a job whose id is not ASCII is delivered there, and one to an unreachable host with the same secrets
    await add_result(redis, keys, "commande-é", url)
    await add_result(redis, keys, "job-nowhere", "http://carol:pw-999999@nowhere.invalid/x?api_key=qk-777777")
    await wait_until(lambda: receiver.count(path) == 2, timeout=15, what="a retry then a delivery")
    await wait_until(lambda: "job-nowhere" in child.log_text(), timeout=10, what="the unresolvable attempt logged")
    # Then the delivery carries an encodable webhook-id that verifies with the body
    got = receiver.on(path)[-1]
    assert got.headers["webhook-id"] == quote("commande-é", safe="")
    assert Webhook(notifiers.secret).verify(got.body, got.headers)["id"] == "commande-é"
    # And no log line holds a URL's credentials or query string
    text = child.log_text()
    assert "url=http://127.0.0.1:%d/secretive" % receiver.port in text
    for secret in ("pa55word", "bob:", "tok-123456", "token=", "pw-999999", "qk-777777", "api_key"):
        assert secret not in text, f"{secret!r} in the notifier log"


async def test_a_receivers_error_page_quoting_the_request_leaves_no_secret_in_the_log_or_the_dead_letter(
    redis: Redis, keys: Keys, notifiers: NotifierFactory, receiver: Receiver
) -> None:
    # Given a receiver whose error page quotes the request it got (its Authorization header, its path and query), as
    # framework error pages and proxies do, behind a webhook URL with credentials and a token in its query
    user, password, token = "whuser", "WhPass777", "WhTokenABCDEFGHIJKLMN"
    basic = base64.b64encode(f"{user}:{password}".encode()).decode()
    path = f"/quoting?token={token}"
    receiver.script(path, [Reply(500, body=f"receiver error: auth=Basic {basic} user={user} pw={password} path={path}".encode())])
    child = notifiers.start("--max-attempts", "1", *FAST, env={"STREAMCREW_LOG_LEVEL": "debug"})
    # When a job's result is delivered there, fails and is dead-lettered
    await add_result(redis, keys, "job-quoted", f"http://{user}:{password}@127.0.0.1:{receiver.port}{path}")
    await wait_until(lambda: redis.xlen(keys.webhooks_dead), timeout=15, what="the webhook dead letter")
    await wait_until(lambda: "job-quoted" in child.log_text(), timeout=10, what="the failed attempt logged")
    ((_, letter),) = await redis.xrange(keys.webhooks_dead)
    # Then the receiver's words are kept (what failed), without what it was sent that is secret: before, the log line's
    # error and the dead letter quoted the Basic pair and the token while its url field was cleaned
    error = letter["error"]
    assert error.startswith("HTTP 500: receiver error: auth=Basic [redacted]"), error
    for where, text in (("the dead letter", error), ("the log", child.log_text())):
        for secret in (basic, password, token, f"{user}:"):
            assert secret not in text, f"{secret!r} in {where}: {text[-600:]}"


def test_a_header_id_is_printable_ascii_whatever_the_job_id() -> None:
    assert header_id("job-1") == "job-1"
    for raw in ("commande-é", "a\r\nx-evil: 1", "", "tab\there", "日本"):
        wid = header_id(raw)
        assert wid and all(0x21 <= ord(c) < 0x7F for c in wid), wid
    headers = Signer([make_secret()]).headers("a\r\nb", b"{}")
    assert "\r" not in headers["webhook-id"] and "\n" not in headers["webhook-id"]


def test_a_receivers_quote_of_a_non_ascii_passwords_basic_header_is_cleaned() -> None:
    # Given a URL whose password is not ASCII, and the Authorization header aiohttp sends for it (latin-1)
    url = "https://user:p%C3%A4ssw0rd-LONG-1@hooks.example.com/in"
    header = aiohttp.BasicAuth("user", "pässw0rd-LONG-1", encoding="latin1").encode()
    # Then a receiver quoting that header is cleaned of all of it (before: the UTF-8 form only, the rest readable)
    assert answer_text(f"denied: Authorization: {header}".encode(), url) == "denied: Authorization: Basic [redacted]"


def test_short_query_values_are_cleaned_where_they_stand_alone_not_inside_words() -> None:
    # Given a URL with short query values that are also parts of words, and a long token
    url = "https://hooks.example.com/in?events=all&source=app&format=json&token=tok_LIVE_0123456789abcdef&v=red"
    said = "415: expected application/json; not json events are allowed; bad token tok_LIVE_0123456789abcdef"
    # Then each value alone is redacted, words that hold one are kept, and no replacement is cleaned again
    assert answer_text(said.encode(), url) == "415: expected application/[redacted]; not [redacted] events are allowed; bad token [redacted]"


def test_an_answer_cut_inside_a_secret_shows_none_of_it_after_long_secrets_shrank() -> None:
    # Given a URL with a long query value and a short one, and an answer quoting both, the short one across the cut
    long_value = "".join(chr(ord("a") + i % 26) for i in range(1208))
    url = f"https://hooks.example.com/in?a={long_value}&pin=K7Q2ZP9"
    text = answer_text(f"echo a={long_value} pin=K7Q2ZP9 ...".encode(), url)
    # Then the short secret's head that the cut left does not show (before: 'pin=K7Q2')
    assert "K7Q2" not in text and text.startswith("echo a=[redacted]"), text
