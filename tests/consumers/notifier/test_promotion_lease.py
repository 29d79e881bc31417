"""One notifier at a time moves a partition's due webhook retries: the holder of its lease (streams.upkeep).

Before, every notifier ran the promotion of every partition four times a second; now the others ask for the lease
once a second, take it up when its holder is SIGKILLed, and are handed it when the holder stops.
"""

from __future__ import annotations

from redis.asyncio import Redis

from consumers.processes import Child
from streams.keys import Keys
from streams.upkeep import ASK_EVERY_S, LEASE_S
from tests.consumers.notifier.conftest import NotifierFactory, add_result
from tests.consumers.notifier.receiver import Receiver, Reply
from tests.support import wait_until

FAST = ("--backoff", "0.05", "--lease", "2")


async def holder_of(redis: Redis, keys: Keys, children: list[Child]) -> Child:
    """The notifier process whose consumer name (``notifier-<host>-<pid>-<hex>``) holds the lease, once one does."""
    async def held() -> bool:
        return await redis.get(keys.webhooks_upkeep) is not None
    await wait_until(held, timeout=10, what="a notifier to take the promotion lease")
    name = await redis.get(keys.webhooks_upkeep)
    (holder,) = [c for c in children if f"-{c.pid}-" in name]
    return holder


async def test_a_sigkilled_holders_retries_are_promoted_by_another_notifier(
    redis: Redis, keys: Keys, notifiers: NotifierFactory, receiver: Receiver
) -> None:
    # Given two notifiers, one of them holding the promotion lease
    a, b = notifiers.start(*FAST), notifiers.start(*FAST)
    victim = await holder_of(redis, keys, [a, b])
    survivor = b if victim is a else a
    # When the holder is SIGKILLed, and a delivery fails once (its retry waits in the delayed set)
    victim.kill()
    receiver.script("/flaky", [Reply(500, body=b"boom")])
    await add_result(redis, keys, "job-flaky", receiver.url("/flaky"))
    # Then the other notifier takes the lease up once it lapses and promotes the retry: delivered on the second try
    await wait_until(lambda: receiver.count("/flaky") == 2, timeout=LEASE_S + ASK_EVERY_S + 15, what="the retried delivery")
    assert await holder_of(redis, keys, [survivor]) is survivor


async def test_a_stopped_holder_lets_the_lease_go(redis: Redis, keys: Keys, notifiers: NotifierFactory) -> None:
    # Given two notifiers, one of them holding the promotion lease
    a, b = notifiers.start(*FAST), notifiers.start(*FAST)
    holder = await holder_of(redis, keys, [a, b])
    other = b if holder is a else a
    # When it is stopped (SIGTERM: it drains and exits)
    holder.terminate()
    assert holder.wait(30) == 0, holder.log_text()[-2000:]
    # Then it let the lease go on its way out (left to lapse, it would name the holder for up to LEASE_S more)
    left = await redis.get(keys.webhooks_upkeep)
    assert left is None or f"-{holder.pid}-" not in left, f"{left} still holds it; its log:\n{holder.log_text()[-3000:]}"
    assert await holder_of(redis, keys, [other]) is other
