"""One notifier at a time moves a partition's due webhook retries: the holder of its lease (streams.upkeep).

Before, every notifier ran the promotion of every partition four times a second; now the others ask for the lease
once a second, take it up when its holder is SIGKILLed, and are handed it when the holder stops.
"""

from __future__ import annotations

from redis.asyncio import Redis

from streams.keys import Keys
from streams.upkeep import ASK_EVERY_S, LEASE_S
from tests.consumers.notifier.conftest import NotifierFactory, add_result
from tests.consumers.notifier.receiver import Receiver, Reply
from tests.support import lease_holder, stopped_holder_lets_go, wait_until

FAST = ("--backoff", "0.05", "--lease", "2")


async def test_a_sigkilled_holders_retries_are_promoted_by_another_notifier(
    redis: Redis, keys: Keys, notifiers: NotifierFactory, receiver: Receiver
) -> None:
    # Given two notifiers, one of them holding the promotion lease
    a, b = notifiers.start(*FAST), notifiers.start(*FAST)
    victim = await lease_holder(redis, keys.webhooks_upkeep, [a, b])
    survivor = b if victim is a else a
    # When the holder is SIGKILLed, and a delivery fails once (its retry waits in the delayed set)
    victim.kill()
    receiver.script("/flaky", [Reply(500, body=b"boom")])
    await add_result(redis, keys, "job-flaky", receiver.url("/flaky"))
    # Then the other notifier takes the lease up once it lapses and promotes the retry: delivered on the second try
    await wait_until(lambda: receiver.count("/flaky") == 2, timeout=LEASE_S + ASK_EVERY_S + 15, what="the retried delivery")
    assert await lease_holder(redis, keys.webhooks_upkeep, [survivor]) is survivor


async def test_a_stopped_holder_lets_the_lease_go(redis: Redis, keys: Keys, notifiers: NotifierFactory) -> None:
    # Given two notifiers, one of them holding the promotion lease
    a, b = notifiers.start(*FAST), notifiers.start(*FAST)
    holder = await lease_holder(redis, keys.webhooks_upkeep, [a, b])
    # When it is stopped (SIGTERM: it drains and exits), then it let the lease go on its way out, for the other
    await stopped_holder_lets_go(redis, keys.webhooks_upkeep, holder, b if holder is a else a)
