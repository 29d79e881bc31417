"""The notifier's commit sent again by redis-py after a lost reply (Redis stalled past the socket timeout, then ran
both copies) answers as the first did: the entries it acked count as delivered, not as taken by another notifier."""

from __future__ import annotations

from consumers.notifier.store import CommitOp, Store
from streams.embedded import RedisServer
from streams.keys import NOTIFIER_GROUP, Keys
from tests.consumers.notifier.conftest import add_result
from tests.support import evalsha_calls, impatient_client, stall_redis


async def test_a_commit_sent_again_during_a_stall_answers_settled(own_redis: RedisServer) -> None:
    # Given two result entries read by notifier n1, and its store on a client that gives a reply up after 0.5 s
    client = impatient_client(own_redis.url)
    keys = Keys("resent-commit")
    try:
        for n in range(2):
            await add_result(client, keys, f"job-{n}", "https://example.com/hook")
        ((_, entries),) = await client.xreadgroup(NOTIFIER_GROUP, "n1", {keys.results: ">"}, count=10)
        store = Store(client, keys)
        await store.promote()  # the scripts loaded, so the stall meets the commit itself
        await store.commit([], group=NOTIFIER_GROUP, consumer="n1")
        calls = await evalsha_calls(client)
        # When n1 commits both while Redis is stalled for 1.5 s (the call goes out again; both copies run)
        stall = await stall_redis(own_redis, 1500)
        settled = await store.commit([CommitOp(keys.results, eid) for eid, _ in entries], group=NOTIFIER_GROUP, consumer="n1")
        await stall
        # Then it hears both settled, as the first copy had them, and nothing is left pending
        assert await evalsha_calls(client) - calls >= 2, "the stall did not make redis-py send the commit again"
        assert settled == [True, True]
        assert (await client.xpending(keys.results, NOTIFIER_GROUP))["pending"] == 0
    finally:
        await client.aclose()


async def test_a_retry_is_due_by_redis_clock_not_the_notifiers(redis, keys: Keys) -> None:
    """Notifiers' clocks may differ: a retry dated by one and promoted by another came back at once (a clock ahead,
    its Retry-After ignored) or late by the skew. It is now written as a delay, dated and promoted by Redis' clock."""
    # Given an entry read by notifier n1, whose delivery failed and waits 60 s, and one to go again at once
    await add_result(redis, keys, "job-late", "https://example.com/hook")
    ((_, entries),) = await redis.xreadgroup(NOTIFIER_GROUP, "n1", {keys.results: ">"}, count=1)
    store = Store(redis, keys)
    seconds, micros = await redis.time()
    before_ms = seconds * 1000 + micros // 1000
    op = CommitOp(keys.results, entries[0][0], delayed=[(60_000, '{"url": "https://example.com/hook", "id": "later"}'),
                                                        (0, '{"url": "https://example.com/hook", "id": "now"}')])
    assert await store.commit([op], group=NOTIFIER_GROUP, consumer="n1") == [True]
    seconds, micros = await redis.time()
    after_ms = seconds * 1000 + micros // 1000
    # Then the first is due 60 s from the commit by Redis' clock, and a promotion moves only the second
    scores = dict(await redis.zrange(keys.webhooks_delayed, 0, -1, withscores=True))
    assert before_ms + 60_000 <= scores['{"url": "https://example.com/hook", "id": "later"}'] <= after_ms + 60_000, scores
    assert await store.promote() == 1
    assert await redis.zcard(keys.webhooks_delayed) == 1
