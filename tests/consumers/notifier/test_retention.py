"""With the notifier down, results past STREAMCREW_RESULTS_MAXLEN are kept, and delivered once it is back."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from redis.asyncio import Redis

from streams.envelope import JobRequest
from streams.keys import Keys
from streams.producer import Producer
from tests.consumers.notifier.conftest import NotifierFactory
from tests.consumers.notifier.receiver import Receiver
from tests.support import WorkerFactory, wait_until

JOBS = 400
KEEP = 20


async def test_results_wait_for_a_notifier_that_is_down(
    redis: Redis, keys: Keys, producer: Producer, workers: WorkerFactory, notifiers: NotifierFactory, receiver: Receiver,
) -> None:
    # Given a worker keeping 20 results once acknowledged, and no notifier running
    workers.start("--concurrency", "50", env={"STREAMCREW_RESULTS_MAXLEN": str(KEEP)})
    # When 400 jobs with webhooks complete (20 times that MAXLEN)
    await producer.publish_many([JobRequest(agent="echo", data={"n": n}, id=f"job-{n}", webhook=receiver.url()) for n in range(JOBS)])
    await wait_until(xlen(redis, keys.results, lambda n: n >= JOBS), timeout=60, what=f"{JOBS} results")
    # And the worker has trimmed since (the lane is trimmed in the same upkeep tick, after its results were written),
    # twice over: a marker job goes through after the first trim
    await wait_until(xlen(redis, keys.lane("normal"), lambda n: n == 0), timeout=20, what="the lane trimmed")
    await producer.publish("echo", {}, id="marker")
    await wait_until(xlen(redis, keys.results, lambda n: n == JOBS + 1), timeout=20, what="the marker's result")
    await wait_until(xlen(redis, keys.lane("normal"), lambda n: n == 0), timeout=20, what="the lane trimmed again")
    # Then every result is still there
    assert await redis.xlen(keys.results) == JOBS + 1
    # And once a notifier starts, every webhook is delivered
    notifiers.start("--concurrency", "100")
    async def all_delivered() -> bool:
        return len({r.headers["webhook-id"] for r in receiver.on("/hook")}) == JOBS

    await wait_until(all_delivered, timeout=60, what=f"{JOBS} deliveries")
    # And after that, acknowledged results are trimmed down to the 20 kept
    await wait_until(xlen(redis, keys.results, lambda n: n <= KEEP), timeout=20, what=f"the results trimmed to {KEEP}")


def xlen(redis: Redis, key: str, test: Callable[[int], bool]) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return test(int(await redis.xlen(key)))
    return check
