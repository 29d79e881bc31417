"""The upkeep's lease across real worker processes: a SIGKILLed holder is replaced, a stopped one hands over."""

from __future__ import annotations

from streams.keys import Keys
from streams.producer import Producer
from streams.upkeep import ASK_EVERY_S, LEASE_S
from tests.support import WorkerFactory, lease_holder, stopped_holder_lets_go, wait_results


async def test_a_sigkilled_holders_partition_is_kept_up_by_another_worker(redis, keys: Keys, producer: Producer,  # type: ignore[no-untyped-def]
                                                                          workers: WorkerFactory) -> None:
    # Given two workers, one of them holding the upkeep lease
    a, b = workers.start(), workers.start()
    victim = await lease_holder(redis, keys.upkeep, [a, b])
    survivor = b if victim is a else a
    # When the holder is SIGKILLed, and a job whose first attempt fails is published: its retry waits in the
    # delayed set for the upkeep to promote it
    victim.kill()
    await producer.publish("echo", {"fail_first": 1}, id="retried")
    # Then the lease lapses, the other worker takes it up and promotes the retry: the job completes, on attempt 2
    (result,) = await wait_results(redis, keys, 1, timeout=LEASE_S + ASK_EVERY_S + 15)
    assert (result.id, result.status, result.attempts) == ("retried", "completed", 2)
    assert await lease_holder(redis, keys.upkeep, [survivor]) is survivor


async def test_a_stopped_holder_lets_the_lease_go(redis, keys: Keys, workers: WorkerFactory) -> None:  # type: ignore[no-untyped-def]
    # Given two workers, one of them holding the upkeep lease
    a, b = workers.start(), workers.start()
    holder = await lease_holder(redis, keys.upkeep, [a, b])
    # When it is stopped (SIGTERM: it drains and exits), then it let the lease go on its way out, for the other
    await stopped_holder_lets_go(redis, keys.upkeep, holder, b if holder is a else a)
