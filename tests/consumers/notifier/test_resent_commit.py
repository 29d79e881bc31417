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
        await store.promote(0)  # the scripts loaded, so the stall meets the commit itself
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
