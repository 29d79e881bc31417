"""A draining worker hands back only what is still its own: a job another worker took over (XAUTOCLAIM, this
worker's lease having looked stalled) stays with that worker, whose run would otherwise be fenced off and a third
run follow, every one of them paying for its agent's calls. And what it counts as handed back went back: a move to
another partition (streams.forward) the drain stopped is let go to the next sweep, not left to wait out the lease."""

from __future__ import annotations

import asyncio
from typing import Any

from redis.asyncio import Redis

from streams.config import StreamSettings
from streams.embedded import RedisServer
from streams.envelope import JobRequest
from streams.jobs import JobProcessor
from streams.keys import Keys, lanes_in_priority, partition_keys
from streams.producer import Producer
from streams.runtime import GroupRuntime
from streams.scripts import Scripts
from tests.streams.test_partition_forward import N, misplaced_id
from tests.streams.test_resent_calls import Echo, drained_through_stall
from tests.support import StallsBeforeScript, serving, wait_results, wait_until


class Gated(Echo):
    """Runs an agent that notes which worker runs it, then waits for the test's gate."""

    def __init__(self, worker: str, runs: list[str], gate: asyncio.Event) -> None:
        self.worker, self.runs, self.gate = worker, runs, gate

    async def execute(self, request: JobRequest, job_id: str, attempt: int, max_attempts: int) -> tuple[Any, dict[str, Any] | None]:
        self.runs.append(self.worker)
        await self.gate.wait()
        return {"by": self.worker, "attempt": attempt}, None


async def test_a_drain_leaves_a_job_another_worker_took_over_with_that_worker(redis: Redis, keys: Keys, settings: StreamSettings) -> None:
    # Given worker w1 (a 120 s lease: it renews nothing within the test) running a job that waits for the gate
    runs: list[str] = []
    gate = asyncio.Event()
    rt1 = GroupRuntime(redis, streams=keys.lanes, group="workers", consumer="w1", concurrency=2, lease_s=120, block_ms=100)
    p1 = JobProcessor(redis, keys, settings, rt1, Gated("w1", runs, gate))
    writer1 = asyncio.create_task(p1.settler.run())
    reader1 = asyncio.create_task(rt1.run())
    await Producer(redis, keys).publish("echo", {}, id="taken-over")
    await wait_until(lambda: runs == ["w1"], timeout=10, what="w1 to run the job")
    # And worker w2 (a 1 s lease) that takes it over, as w1's lease looks stalled to it, and runs it too
    rt2 = GroupRuntime(redis, streams=keys.lanes, group="workers", consumer="w2", concurrency=2, lease_s=1, block_ms=100)
    p2 = JobProcessor(redis, keys, settings, rt2, Gated("w2", runs, gate))
    writer2 = asyncio.create_task(p2.settler.run())
    async with serving(rt2):
        await wait_until(lambda: runs == ["w1", "w2"], timeout=10, what="w2 to take the job over and run it")
        # When w1 drains while both runs go on: its grace passes, and it hands back what it still runs
        finished, handed_back = await rt1.drain(0.1)
        await p1.settler.close(writer1)
        await asyncio.gather(reader1, return_exceptions=True)
        # Then the job stays with w2, which finishes it; no copy went back to the lane for a third run
        gate.set()
        (ended,) = await wait_results(redis, keys, 1, timeout=10)
        assert runs == ["w1", "w2"], f"the job ran again after w2's run: {runs}"
        assert (ended.id, ended.status.value, ended.worker, ended.attempts) == ("taken-over", "completed", "w2", 2)
        assert await redis.xlen(keys.lane("normal")) == 1, "w1's hand-back XADDed a copy of the job w2 was running"
        assert await redis.xlen(keys.resumed("normal")) == 0, "w1's hand-back XADDed a copy of the job w2 was running"
        assert (finished, handed_back) == (0, 0)
        await wait_until(lambda: _none_pending(redis, keys), timeout=5, what="w2 to ack its entry")
    await p2.settler.close(writer2)


async def _none_pending(redis: Redis, keys: Keys) -> bool:
    return int((await redis.xpending(keys.lane("normal"), "workers"))["pending"]) == 0


async def test_a_move_the_drain_stopped_is_let_go_to_the_next_sweep(own_redis: RedisServer) -> None:
    # Given a worker of 4 partitions (a 60 s lease) whose next script call, the move of a raw XADD into a partition
    # its id does not belong to, meets a 2 s stall
    keys = Keys("moving")
    parts = partition_keys(keys, N)
    client = StallsBeforeScript.to(own_redis, timeout_s=5)  # patient: the call is sent once
    settings = StreamSettings(redis_url=own_redis.url, prefix=keys.prefix, partitions=N)
    runtime = GroupRuntime(client, streams=lanes_in_priority(parts), level_size=N, group="workers", consumer="w1", concurrency=4,
                           lease_s=60, block_ms=100, tick_s=3600)  # no upkeep script before the move's
    processor = JobProcessor(client, keys, settings, runtime, Echo(), partitions=parts)
    writer = asyncio.create_task(processor.settler.run())
    reader = asyncio.create_task(runtime.run())
    await client.script_load(Scripts(client).publish.script)
    job_id, _, wrong = misplaced_id("drained")
    lane = parts[wrong].lane("normal")
    client.armed_ms = 2000
    async with Redis.from_url(own_redis.url, decode_responses=True) as other:
        entry = await other.xadd(lane, {"agent": "echo", "data": "{}", "id": job_id})
        await wait_until(lambda: client.stall is not None, timeout=10, what="the move to meet the stall")
        # When the worker drains (SIGTERM) with the move under way past its grace
        finished, handed_back = await drained_through_stall(client, runtime, processor, writer, reader, grace_s=0.5)
        # Then the entry it counts as handed back looks idle past the lease: another worker's next sweep takes it
        (pending,) = await other.xpending_range(lane, "workers", min="-", max="+", count=10)
        assert (pending["message_id"], pending["consumer"]) == (entry, "w1")
        assert pending["time_since_delivered"] > 60_000, f"the stopped move waits out the lease: {pending}"
        assert (finished, handed_back) == (0, 1)
        taken = await other.xautoclaim(lane, "workers", "w2", 60_000, "0-0", count=10)
        assert [eid for eid, _ in taken[1]] == [entry]
    await client.aclose()


async def test_a_job_that_ended_while_its_settle_meets_a_stall_counts_as_finished(own_redis: RedisServer) -> None:
    # Given a worker (a 120 s lease, no upkeep) running a job that waits for the gate, its client set to stall Redis
    # for 2 s at its next script call: the settle of that job
    keys = Keys("settling")
    runs: list[str] = []
    gate = asyncio.Event()
    client = StallsBeforeScript.to(own_redis, timeout_s=5)  # patient: the call is sent once
    settings = StreamSettings(redis_url=own_redis.url, prefix=keys.prefix)
    runtime = GroupRuntime(client, streams=keys.lanes, group="workers", consumer="w1", concurrency=4, lease_s=120,
                           block_ms=100, tick_s=3600)
    processor = JobProcessor(client, keys, settings, runtime, Gated("w1", runs, gate))
    writer = asyncio.create_task(processor.settler.run())
    reader = asyncio.create_task(runtime.run())
    async with Redis.from_url(own_redis.url, decode_responses=True) as other:
        published = await Producer(other, keys).publish("echo", {}, id="ended-in-stall")
    await wait_until(lambda: runs == ["w1"], timeout=10, what="w1 to run the job")
    await client.script_load(Scripts(client).settle.script)
    # When the job ends and its settle meets the stall, and the worker drains (SIGTERM) with a grace shorter than it
    client.armed_ms = 2000
    gate.set()
    await wait_until(lambda: client.stall is not None, timeout=10, what="the settle to meet the stall")
    finished, handed_back = await drained_through_stall(client, runtime, processor, writer, reader, grace_s=0.5)
    # Then the job counts as finished (its settle went out once Redis answered), not as neither finished nor handed back
    ended = await wait_results(client, keys, 1, timeout=5)
    assert [(r.id, r.status.value, r.attempts) for r in ended] == [(published.job_id, "completed", 1)]
    assert (finished, handed_back) == (1, 0)
    await client.aclose()
