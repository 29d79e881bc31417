"""Strict lanes: a worker with a free slot takes high before normal before low."""

from streams.envelope import JobRequest
from streams.keys import Keys
from tests.support import wait_results


async def test_high_jobs_overtake_a_low_backlog(redis, keys: Keys, producer, workers) -> None:
    # Given a worker with one slot, busy with a backlog of 40 low jobs
    await producer.publish_many([JobRequest(agent="echo", data={"sleep_s": 0.05}, id=f"low-{i}") for i in range(40)], priority="low")
    workers.start("--concurrency", "1")
    await wait_results(redis, keys, 2, timeout=20)
    # When 5 high jobs are XADDed after them
    await producer.publish_many([JobRequest(agent="echo", data={}, id=f"high-{i}") for i in range(5)], priority=9)
    got = await wait_results(redis, keys, 45, timeout=60)
    order = [r.id for r in got]
    # Then every high job finishes before most of the low ones
    last_high = max(order.index(f"high-{i}") for i in range(5))
    assert last_high < 20, order
