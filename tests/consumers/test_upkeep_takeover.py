"""The upkeep's lease across real worker processes: a SIGKILLed holder is replaced, a stopped one hands over."""

from __future__ import annotations

from consumers.processes import Child
from streams.keys import Keys
from streams.producer import Producer
from streams.upkeep import ASK_EVERY_S, LEASE_S
from tests.support import WorkerFactory, wait_results, wait_until


async def holder_of(redis, keys: Keys, children: list[Child]) -> Child:  # type: ignore[no-untyped-def]
    """The worker process whose consumer name (``<host>-<pid>-<hex>``) holds the lease, once one does."""
    async def held() -> bool:
        return await redis.get(keys.upkeep) is not None
    await wait_until(held, timeout=10, what="a worker to take the upkeep lease")
    name = await redis.get(keys.upkeep)
    (holder,) = [c for c in children if f"-{c.pid}-" in name]
    return holder


async def test_a_sigkilled_holders_partition_is_kept_up_by_another_worker(redis, keys: Keys, producer: Producer,  # type: ignore[no-untyped-def]
                                                                          workers: WorkerFactory) -> None:
    # Given two workers, one of them holding the upkeep lease
    a, b = workers.start(), workers.start()
    victim = await holder_of(redis, keys, [a, b])
    survivor = b if victim is a else a
    # When the holder is SIGKILLed, and a job whose first attempt fails is published: its retry waits in the
    # delayed set for the upkeep to promote it
    victim.kill()
    await producer.publish("echo", {"fail_first": 1}, id="retried")
    # Then the lease lapses, the other worker takes it up and promotes the retry: the job completes, on attempt 2
    (result,) = await wait_results(redis, keys, 1, timeout=LEASE_S + ASK_EVERY_S + 15)
    assert (result.id, result.status, result.attempts) == ("retried", "completed", 2)
    assert await holder_of(redis, keys, [survivor]) is survivor


async def test_a_stopped_holder_lets_the_lease_go(redis, keys: Keys, workers: WorkerFactory) -> None:  # type: ignore[no-untyped-def]
    # Given two workers, one of them holding the upkeep lease
    a, b = workers.start(), workers.start()
    holder = await holder_of(redis, keys, [a, b])
    other = b if holder is a else a
    # When it is stopped (SIGTERM: it drains and exits)
    holder.terminate()
    assert holder.wait(30) == 0, holder.log_text()[-2000:]
    # Then it let the lease go on its way out (left to lapse, it would name the holder for up to LEASE_S more): free,
    # or already the other worker's
    left = await redis.get(keys.upkeep)
    assert left is None or f"-{holder.pid}-" not in left, f"{left} still holds it; its log:\n{holder.log_text()[-3000:]}"
    assert await holder_of(redis, keys, [other]) is other
