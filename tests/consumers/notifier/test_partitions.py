"""The notifier with ``STREAMCREW_PARTITIONS=4`` on one real Redis (contract §10): every partition read, each settled in its own."""

from __future__ import annotations

from collections import Counter

import orjson
from redis.asyncio import Redis
from standardwebhooks import Webhook

from consumers.notifier.dead import list_webhook_dead
from streams.keys import Keys, partition_keys
from streams.layout import layout_key
from tests.consumers.notifier.conftest import NotifierFactory, add_result, pending
from tests.consumers.notifier.receiver import Receiver, Reply
from tests.support import wait_until

PARTITIONS = 4
PARTITIONED = {"STREAMCREW_PARTITIONS": str(PARTITIONS)}
FAST = ("--backoff", "0.05", "--lease", "2")


def webhook_ids(receiver: Receiver, path: str) -> Counter[str]:
    return Counter(r.headers["webhook-id"] for r in receiver.on(path))


async def all_acked(redis: Redis, keys: Keys) -> bool:
    """Nothing pending in any partition's results stream, and nothing left due or delayed."""
    for p in partition_keys(keys, PARTITIONS):
        if await pending(redis, p) or await redis.zcard(p.webhooks_delayed) or await redis.xlen(p.webhooks_due):
            return False
    return True


async def test_every_partition_is_delivered_once_signed_and_settled_in_its_own_partition(
    redis: Redis, keys: Keys, notifiers: NotifierFactory, receiver: Receiver, refusing_port: int,
) -> None:
    parts = partition_keys(keys, PARTITIONS)
    down = f"http://127.0.0.1:{refusing_port}/down"
    # Given results in each of 4 partitions: 25 to one endpoint, one to a flaky endpoint, one to an endpoint that is down
    for p, part in enumerate(parts):
        for n in range(25):
            await add_result(redis, part, f"p{p}-{n}", receiver.url("/hook"))
        receiver.script(f"/flaky{p}", [Reply(500)])
        await add_result(redis, part, f"p{p}-flaky", receiver.url(f"/flaky{p}"))
        await add_result(redis, part, f"p{p}-down", down)
    # When one notifier serves every partition, pacing the shared endpoint at 3 at a time
    notifiers.start(*FAST, "--max-attempts", "2", env={**PARTITIONED, "STREAMCREW_PER_ENDPOINT_CONCURRENCY": "3"})
    # Then every result is delivered exactly once, signed, and the flaky ones after one retry
    wanted = {f"p{p}-{n}" for p in range(PARTITIONS) for n in range(25)}

    async def delivered() -> bool:
        return set(webhook_ids(receiver, "/hook")) == wanted and all(receiver.count(f"/flaky{p}") == 2 for p in range(PARTITIONS))

    await wait_until(delivered, timeout=20, what="every partition's results delivered")
    await wait_until(lambda: all_acked(redis, keys), timeout=15, what="every entry acked in its own partition")
    assert max(webhook_ids(receiver, "/hook").values()) == 1
    assert all(webhook_ids(receiver, f"/flaky{p}") == Counter({f"p{p}-flaky": 2}) for p in range(PARTITIONS))
    for got in receiver.requests:
        assert Webhook(notifiers.secret).verify(got.body, got.headers)["id"] == got.headers["webhook-id"]
    # And each dead letter is in its own partition's webhooks:dead; the unpartitioned keys stay untouched
    async def dead_letters_in_place() -> bool:
        return [await redis.xlen(part.webhooks_dead) for part in parts] == [1] * PARTITIONS

    await wait_until(dead_letters_in_place, timeout=10, what="one dead letter in each partition")
    for p, part in enumerate(parts):
        (letter,) = await list_webhook_dead(redis, part)
        assert (letter.id, letter.url, letter.attempts) == (f"p{p}-down", down, 2)
    # Nothing outside the partitions but the prefix's record of N (streams.layout)
    assert [k async for k in redis.scan_iter(match=f"{keys.prefix}:[^{{]*")] == [layout_key(keys)]


async def test_sigkilled_notifier_loses_nothing_in_any_partition(redis: Redis, keys: Keys, notifiers: NotifierFactory) -> None:
    # Given a receiver taking ~20 ms per request and a backlog of 100 results in each of 4 partitions
    receiver = Receiver(delay_s=0.02).start()
    try:
        parts = partition_keys(keys, PARTITIONS)
        for p, part in enumerate(parts):
            for n in range(100):
                await add_result(redis, part, f"p{p}-{n}", receiver.url("/hook"))
        first = notifiers.start("--lease", "2", "--concurrency", "40", env=PARTITIONED)
        # When the notifier is SIGKILLed part-way through
        await wait_until(lambda: receiver.count() >= 40, timeout=10, what="deliveries under way")
        first.kill()
        assert len(webhook_ids(receiver, "/hook")) < 4 * 100
        # Then a new notifier delivers every result at least once (re-sent only if in flight at the kill) and acks every entry
        notifiers.start("--lease", "2", env=PARTITIONED)
        wanted = {f"p{p}-{n}" for p in range(PARTITIONS) for n in range(100)}
        await wait_until(lambda: set(webhook_ids(receiver, "/hook")) == wanted, timeout=25, what="every result after the restart")
        await wait_until(lambda: all_acked(redis, keys), timeout=10, what="every entry acked")
        duplicates = sum(n - 1 for n in webhook_ids(receiver, "/hook").values())
        assert duplicates <= 40, duplicates  # at most what the first notifier held: its concurrency
    finally:
        receiver.stop()


async def test_partition_ranges_split_the_deliveries(
    redis: Redis, keys: Keys, notifiers: NotifierFactory, receiver: Receiver
) -> None:
    parts = partition_keys(keys, PARTITIONS)
    for p, part in enumerate(parts):
        await add_result(redis, part, f"p{p}", receiver.url("/hook"))
    # Given a notifier that reads partitions 0-1 only (the variable, as in a deployment)
    notifiers.start(*FAST, env={**PARTITIONED, "STREAMCREW_SERVE_PARTITIONS": "0-1"})
    await wait_until(lambda: receiver.count() == 2, timeout=10, what="partitions 0-1 delivered")
    assert set(webhook_ids(receiver, "/hook")) == {"p0", "p1"}
    assert [await pending(redis, p) for p in parts[2:]] == [0, 0]
    assert all([await redis.xlen(p.results) == 1 for p in parts])
    # Then a notifier of 2-3 (the CLI option) delivers the rest
    notifiers.start(*FAST, "--partitions", "2-3", env=PARTITIONED)
    await wait_until(lambda: receiver.count() == 4, timeout=10, what="partitions 2-3 delivered")
    assert webhook_ids(receiver, "/hook") == Counter({f"p{p}": 1 for p in range(PARTITIONS)})


async def test_a_retry_waits_in_its_own_partition(redis: Redis, keys: Keys, notifiers: NotifierFactory, receiver: Receiver) -> None:
    parts = partition_keys(keys, PARTITIONS)
    # Given one result per partition to an endpoint that fails, and a first retry 30 s off
    receiver.script("/fails", [Reply(503)] * PARTITIONS)
    for p, part in enumerate(parts):
        await add_result(redis, part, f"p{p}", receiver.url("/fails"))
    notifiers.start("--backoff", "30", env=PARTITIONED)

    async def each_parked() -> bool:
        return [await redis.zcard(part.webhooks_delayed) for part in parts] == [1] * PARTITIONS

    # Then each retry waits in its own partition's delayed set, its results entry acknowledged there
    await wait_until(each_parked, timeout=10, what="one retry parked in each partition")
    for p, part in enumerate(parts):
        (member,) = await redis.zrange(part.webhooks_delayed, 0, -1)
        assert orjson.loads(str(member))["id"] == f"p{p}"
        assert await pending(redis, part) == 0
