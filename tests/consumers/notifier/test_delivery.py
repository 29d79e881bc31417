"""The notifier against a real HTTP receiver on loopback: signatures, retries, dead letters, replay, 410."""

from __future__ import annotations

import os
import subprocess

import orjson
import pytest
from redis.asyncio import Redis
from standardwebhooks import Webhook

from consumers.processes import streamcrew_cmd
from consumers.notifier.dead import list_webhook_dead, purge_webhook_dead, replay_webhook_dead
from consumers.notifier.handler import NotifierHandler
from consumers.notifier.store import Pending
from streams.embedded import free_port
from streams.envelope import Status
from streams.keys import Keys
from tests.consumers.notifier.conftest import NotifierFactory, add_result, make_secret, pending
from tests.consumers.notifier.receiver import Receiver, Reply
from tests.support import wait_until

FAST = ("--backoff", "0.05", "--lease", "2")


async def test_delivery_is_signed_per_standard_webhooks_and_verifies_with_each_secret(
    redis: Redis, keys: Keys, notifiers: NotifierFactory, receiver: Receiver
) -> None:
    # Given a notifier with two secrets (a rotation under way)
    old, new = notifiers.secret, make_secret()
    notifiers.secret = f"{old} {new}"
    notifiers.start(*FAST)
    # When a result with a webhook lands on the results stream
    entry = await add_result(redis, keys, "job-sig-1", receiver.url(), result={"answer": 42})
    await wait_until(lambda: receiver.count() == 1, timeout=10, what="one delivery")
    # Then the body is the result event and both secrets verify it
    got = receiver.requests[0]
    assert got.headers["content-type"] == "application/json"
    assert got.headers["webhook-id"] == "job-sig-1"
    assert len(got.headers["webhook-signature"].split(" ")) == 2
    for secret in (old, new):
        payload = Webhook(secret).verify(got.body, got.headers)
        assert payload["id"] == "job-sig-1" and payload["status"] == "completed" and payload["result"] == {"answer": 42}
    with pytest.raises(Exception, match="No matching signature"):
        Webhook(make_secret()).verify(got.body, got.headers)
    # And the entry is acknowledged but never deleted from the results stream (other groups read it)
    await wait_until(lambda: _eq(pending(redis, keys), 0), timeout=5, what="the entry acked")
    assert [eid for eid, _ in await redis.xrange(keys.results)] == [entry]


async def test_failing_twice_then_ok_is_delivered_once_more_with_the_same_id(
    redis: Redis, keys: Keys, notifiers: NotifierFactory, receiver: Receiver
) -> None:
    # Given a receiver that fails twice (500, then a timeout-free 502) before answering 200
    receiver.script("/flaky", [Reply(500, body=b"boom"), Reply(502)])
    notifiers.start(*FAST)
    # When one result is delivered to it
    await add_result(redis, keys, "job-flaky", receiver.url("/flaky"))
    await wait_until(lambda: receiver.count("/flaky") == 3, timeout=15, what="three attempts")
    # Then the third attempt succeeded, with the same webhook-id, each signed anew
    hits = receiver.on("/flaky")
    assert {h.headers["webhook-id"] for h in hits} == {"job-flaky"}
    for h in hits:
        Webhook(notifiers.secret).verify(h.body, h.headers)
    await wait_until(lambda: _eq(redis.zcard(keys.webhooks_delayed), 0), timeout=5, what="no retry left")
    assert await list_webhook_dead(redis, keys) == []
    assert receiver.count("/flaky") == 3


async def test_receiver_down_dead_letters_after_max_attempts_and_replay_delivers(
    redis: Redis, keys: Keys, notifiers: NotifierFactory
) -> None:
    # Given an endpoint where nothing listens, and three attempts allowed
    port = free_port()
    url = f"http://127.0.0.1:{port}/down"
    notifier = notifiers.start(*FAST, "--max-attempts", "3")
    await add_result(redis, keys, "job-down", url, tenant="acme")
    # When every attempt fails, the delivery lands in the webhook dead letters with its reason (and its job's tenant,
    # which a replay keeps: the tenant's share of deliveries in flight holds for it too)
    await wait_until(lambda: _eq(redis.xlen(keys.webhooks_dead), 1), timeout=15, what="a webhook dead letter")
    ((_, raw),) = await redis.xrange(keys.webhooks_dead)
    assert raw["tenant"] == "acme"
    (letter,) = await list_webhook_dead(redis, keys)
    assert (letter.id, letter.url, letter.attempts, letter.last_status) == ("job-down", url, 3, None)
    assert "ConnectError" in letter.error and "attempt 3 of 3" in letter.error
    assert letter.event["id"] == "job-down" and letter.event["status"] == "completed"
    # And its log tells the first two attempts as retried and the last as failed
    told = [line.split(" outcome=")[1].split()[0] for line in notifier.log_text().splitlines() if "webhook job=job-down" in line]
    assert told == ["retry", "retry", "failed"], told
    # Then once the endpoint is up, a replay delivers it exactly once more
    receiver = Receiver(port).start()
    try:
        replayed, skipped = await replay_webhook_dead(redis, keys, None)
        assert (replayed, skipped) == ([letter.entry_id], [])
        await wait_until(lambda: receiver.count("/down") == 1, timeout=10, what="the replayed delivery")
        got = receiver.on("/down")[0]
        assert Webhook(notifiers.secret).verify(got.body, got.headers)["id"] == "job-down"
        assert await redis.xlen(keys.webhooks_dead) == 0
        # And replaying a letter that is gone is reported, not an error
        assert await replay_webhook_dead(redis, keys, [letter.entry_id]) == ([], [f"no webhook dead letter {letter.entry_id} (already replayed or purged?)"])
    finally:
        receiver.stop()


async def test_a_replayed_webhook_dead_letter_keeps_its_jobs_tenant(redis: Redis, keys: Keys) -> None:
    # Given a webhook dead letter of a tenant's job, as the notifier writes it
    letter = NotifierHandler._dead(Pending("job-t", "https://example.com/h", "{}", tenant="acme"), 3, "503", "HTTP 503")
    entry_id = await redis.xadd(keys.webhooks_dead, letter)
    # When it is replayed
    assert await replay_webhook_dead(redis, keys, [entry_id]) == ([entry_id], [])
    # Then the delivery it queues names the tenant again (held to the tenant's share in flight), with a fresh budget
    ((_, fields),) = await redis.xrange(keys.webhooks_due)
    again = Pending.from_fields(fields)
    assert (again.id, again.tenant, again.attempts) == ("job-t", "acme", 0)


async def test_410_gone_stops_retries(redis: Redis, keys: Keys, notifiers: NotifierFactory, receiver: Receiver) -> None:
    # Given an endpoint answering 410 Gone
    receiver.script("/gone", [Reply(410, body=b"unsubscribed")])
    notifiers.start(*FAST, "--max-attempts", "5")
    await add_result(redis, keys, "job-gone", receiver.url("/gone"))
    # When the notifier delivers, it dead-letters at once
    await wait_until(lambda: _eq(redis.xlen(keys.webhooks_dead), 1), timeout=10, what="a dead letter for 410")
    (letter,) = await list_webhook_dead(redis, keys)
    assert (letter.attempts, letter.last_status) == (1, 410)
    assert "410" in letter.error and "unsubscribed" in letter.error
    # Then nothing is left to retry, and the endpoint was called once
    assert await redis.zcard(keys.webhooks_delayed) == 0
    await wait_until(lambda: _eq(pending(redis, keys), 0), timeout=5, what="the entry acked")
    assert receiver.count("/gone") == 1
    assert await purge_webhook_dead(redis, keys) == 1


@pytest.mark.parametrize(("retry_after", "backoff", "gap_s"), [("1", "0.01", 0.95), ("0", "1", 0.45)], ids=["honoured", "zero"])
async def test_retry_after_is_a_floor_on_the_backoff(redis: Redis, keys: Keys, notifiers: NotifierFactory, receiver: Receiver,
                                                     retry_after: str, backoff: str, gap_s: float) -> None:
    # Given an endpoint that answers 503 with a Retry-After: 1 s with a far shorter backoff, or 0 with a 1 s backoff
    # (0.5 - 1 s with its jitter; before, 'Retry-After: 0' spent all the attempts in a second and a half)
    receiver.script("/busy", [Reply(503, headers={"retry-after": retry_after})])
    notifiers.start("--backoff", backoff, "--lease", "2")
    await add_result(redis, keys, "job-ra", receiver.url("/busy"))
    # When it is retried, it waits the longer of the two: a receiver may ask for more time, not for less
    await wait_until(lambda: receiver.count("/busy") == 2, timeout=10, what="the retry")
    first, second = receiver.on("/busy")
    assert second.at - first.at >= gap_s


async def test_a_real_worker_result_is_delivered(
    redis: Redis, keys: Keys, notifiers: NotifierFactory, receiver: Receiver, producer: object, workers: object
) -> None:
    # Given a worker and a notifier
    workers.start()  # type: ignore[attr-defined]
    notifiers.start(*FAST)
    # When a job with a webhook runs
    published = await producer.publish("echo", {"hello": "world"}, webhook=receiver.url("/e2e"))  # type: ignore[attr-defined]
    # Then its result event arrives, signed
    await wait_until(lambda: receiver.count("/e2e") == 1, timeout=15, what="the worker's result delivered")
    got = receiver.on("/e2e")[0]
    payload = Webhook(notifiers.secret).verify(got.body, got.headers)
    assert payload["id"] == published.job_id == got.headers["webhook-id"]
    assert payload["status"] == Status.COMPLETED and payload["result"] == {"echo": {"hello": "world"}}
    assert orjson.loads(got.body)["webhook"] == receiver.url("/e2e")


async def _eq(awaitable: object, expected: int) -> bool:
    return int(await awaitable) == expected  # type: ignore[misc]


async def test_webhooks_dead_list_shows_a_receivers_text_as_text(
    redis: Redis, keys: Keys, notifiers: NotifierFactory, receiver: Receiver, redis_url: str, prefix: str
) -> None:
    # Given a receiver whose error answer looks like console markup, and one attempt allowed
    receiver.script("/markup", [Reply(500, body=b"[/x] [link=https://evil.example]click[/link]")])
    notifiers.start(*FAST, "--max-attempts", "1")
    await add_result(redis, keys, "job-[/b]", receiver.url("/markup"))
    await wait_until(lambda: _eq(redis.xlen(keys.webhooks_dead), 1), timeout=10, what="a webhook dead letter")
    # When the operator lists the webhook dead letters as a table
    listed = subprocess.run(streamcrew_cmd("webhooks", "dead", "list", "--redis-url", redis_url, "--prefix", prefix),
                            capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "300"})
    # Then the table shows the receiver's text and the job id as they are (before: rich read them as markup,
    # and the listing died with a MarkupError)
    assert listed.returncode == 0, listed.stderr
    assert "[/x] [link=https://evil.example]click[/link]" in listed.stdout and "job-[/b]" in listed.stdout, listed.stdout
