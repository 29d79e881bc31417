"""Real worker processes killed with SIGKILL, drained with SIGTERM, and Redis restarted under them."""

import asyncio
import os
import re
import signal
import subprocess
import time

import pytest
from redis.asyncio import Redis

from consumers.processes import Child, streamcrew_cmd
from streams.connection import connect
from streams.embedded import RedisServer, free_port
from streams.envelope import JobRequest
from streams.keys import Keys
from streams.producer import Producer
from tests.support import results, undelivered, wait_for_log, wait_results, wait_until

PAUSED_PAST_TAKE_OVER_S = 3.0


async def _pending(redis, keys: Keys, lane: str = "normal") -> int:
    return int((await redis.xpending(keys.lane(lane), "workers"))["pending"])


async def test_sigkilled_worker_jobs_are_completed_once_by_another(redis, keys: Keys, producer, workers) -> None:
    # Given a worker with a 2 s lease that has claimed 20 one-second jobs
    victim = workers.start("--concurrency", "20", "--lease", "2")
    await producer.publish_many([JobRequest(agent="echo", data={"sleep_s": 1}, id=f"j{i}") for i in range(20)])
    await wait_until(lambda: _count_running(redis, keys, 20), timeout=15, what="20 jobs running on the victim")
    # When it is SIGKILLed mid-job and another worker starts
    victim.kill()
    rescuer = workers.start("--concurrency", "20", "--lease", "2")
    # Then every job completes exactly once, after a second attempt
    got = await wait_results(redis, keys, 20, timeout=30)
    assert sorted(r.id for r in got) == sorted(f"j{i}" for i in range(20))
    assert all(r.status == "completed" and r.attempts == 2 for r in got), got
    assert await _pending(redis, keys) == 0
    # And the rescuer's log says so, naming the first ten job ids of each sweep and how many more (the entries were
    # claimed in more than one read, so their leases can lapse a sweep apart)
    sweeps = [(int(m[1]), ln) for ln in rescuer.log_text().splitlines() if (m := re.search(r"reclaimed (\d+) normal entries", ln))]
    assert sum(n for n, _ in sweeps) == 20, rescuer.log_text()[-2000:]
    for n, line in sweeps:
        named = line.split(": jobs ", 1)[1].split(" and ")[0].split(", ")
        assert len(named) == min(n, 10) and set(named) <= {f"j{i}" for i in range(20)}, line
        assert line.endswith(f" and {n - 10} more") if n > 10 else not line.endswith(" more"), line


async def _count_running(redis, keys: Keys, n: int) -> bool:
    statuses = [await redis.hget(keys.job(f"j{i}"), "status") for i in range(n)]
    return statuses.count("running") == n


async def test_live_worker_long_job_is_not_stolen(redis, keys: Keys, producer, workers) -> None:
    # Given two workers with a 2 s lease, and an 8 s job on the first
    first = workers.start("--lease", "2")
    await producer.publish("echo", {"sleep_s": 8}, id="long")
    await wait_until(lambda: _status_is(redis, keys, "long", "running"), timeout=10, what="the long job to start")
    owner = await redis.hget(keys.job("long"), "worker")
    second = workers.start("--lease", "2")
    # When it runs four times longer than the lease
    (result,) = await wait_results(redis, keys, 1, timeout=30)
    # Then it completed once, on its first attempt, by the worker that started it
    assert result.status == "completed" and result.attempts == 1
    assert result.worker == owner
    assert "reclaimed" not in second.log_text()
    assert first.alive() and second.alive()


async def _status_is(redis, keys: Keys, job_id: str, status: str) -> bool:
    return await redis.hget(keys.job(job_id), "status") == status


async def test_sigterm_drains_within_grace_and_loses_nothing(redis, keys: Keys, producer, workers) -> None:
    # Given a worker with a 3 s grace running short and long jobs
    worker = workers.start("--concurrency", "10", "--grace", "3", "--lease", "30")
    await producer.publish_many([JobRequest(agent="echo", data={"sleep_s": 0.5}, id=f"short-{i}") for i in range(5)])
    await producer.publish_many([JobRequest(agent="echo", data={"sleep_s": 30}, id=f"long-{i}") for i in range(5)])
    await wait_until(lambda: _all_running(redis, keys), timeout=10, what="10 jobs running")
    # When it gets SIGTERM
    t0 = time.monotonic()
    worker.terminate()
    code = await asyncio.to_thread(worker.wait, 15)
    # Then it exits within the grace period, short jobs done, long jobs handed back at once
    assert code == 0, worker.log_text()[-2000:]
    assert time.monotonic() - t0 < 3 + 3
    assert "5 in-flight jobs finished, 5 handed back" in worker.log_text()
    got = await results(redis, keys)
    assert sorted(r.id for r in got) == sorted(f"short-{i}" for i in range(5))
    assert len(await undelivered(redis, keys.resumed("normal"))) == 5  # read before the lane: no second wait behind it
    assert await _pending(redis, keys) == 0
    # And another worker completes the handed-back jobs without waiting for a lease
    assert all([await redis.hget(keys.job(f"long-{i}"), "status") == "queued" for i in range(5)])
    replacement = workers.start("--concurrency", "10", "--lease", "30")
    await wait_until(lambda: _status_is(redis, keys, "long-0", "running"), timeout=10, what="a handed-back job to restart")
    record = await redis.hgetall(keys.job("long-0"))
    assert record["attempts"] == "1", record  # the interrupted attempt is not counted
    replacement.kill()


async def _all_running(redis, keys: Keys) -> bool:
    ids = [f"short-{i}" for i in range(5)] + [f"long-{i}" for i in range(5)]
    return all([await redis.hget(keys.job(j), "status") == "running" for j in ids])


@pytest.fixture
def own_redis(redis_binary: str):
    server = RedisServer(redis_binary, persist=True).start()
    yield server
    server.close()


async def test_worker_survives_a_redis_restart(own_redis: RedisServer, prefix: str, tmp_path) -> None:
    # Given a worker on a Redis with AOF persistence, with jobs done before the restart
    keys = Keys(prefix)
    redis = connect(own_redis.url)
    producer = Producer(redis, keys)
    env = {"STREAMCREW_REDIS_URL": own_redis.url, "STREAMCREW_PREFIX": prefix, "STREAMCREW_METRICS_PORT": "0"}
    worker = Child(streamcrew_cmd("worker", "--concurrency", "10"), env=env, log_path=tmp_path / "worker.log")
    try:
        wait_for_log(worker, " ready: ")
        await producer.publish_many([JobRequest(agent="echo", data={}, id=f"before-{i}") for i in range(10)])
        await wait_results(redis, keys, 10, timeout=20)
        # When Redis stops for a while, jobs are queued in its absence... then it comes back
        own_redis.stop()
        await asyncio.sleep(1.5)  # an outage, not a synchronisation: the worker must ride it out
        own_redis.start()
        await producer.publish_many([JobRequest(agent="echo", data={}, id=f"after-{i}") for i in range(10)])
        # Then the worker reconnects and completes the new jobs; nothing Redis kept is lost
        got = await wait_results(redis, keys, 20, timeout=40)
        assert sorted(r.id for r in got) == sorted([f"before-{i}" for i in range(10)] + [f"after-{i}" for i in range(10)])
        assert worker.alive()
        assert "Redis is back" in worker.log_text()
    finally:
        worker.kill()
        await redis.aclose()


async def test_a_result_fenced_off_is_logged_as_fenced(redis, keys: Keys, producer, workers) -> None:
    # Given a worker running a three-second job
    worker = workers.start()
    await producer.publish("echo", {"sleep_s": 3}, id="overtaken")

    async def running() -> bool:
        return await redis.hget(keys.job("overtaken"), "status") == "running"

    await wait_until(running, timeout=15, what="the job to run")
    # When, meanwhile, its record ends elsewhere (as when a peer that reclaimed it finished first)
    await redis.hset(keys.job("overtaken"), mapping={"status": "completed", "result": '"from the peer"'})
    # Then the worker's own ending is fenced off: no second result, and its log says so, not "completed"
    await wait_until(lambda: _logged(worker, "job=overtaken"), timeout=15, what="the worker's log line for the job")
    line = next(line for line in worker.log_text().splitlines() if "job=overtaken" in line)
    assert "outcome=fenced" in line, line
    assert await redis.xlen(keys.results) == 0
    assert await redis.hget(keys.job("overtaken"), "result") == '"from the peer"'


async def _logged(worker: Child, text: str) -> bool:
    return text in worker.log_text()


async def test_a_run_taken_over_is_stopped_once_the_other_run_ended_the_job(redis, keys: Keys, producer, workers) -> None:
    # Given a worker running a ten-second job, paused (SIGSTOP) past its 2 s lease, and a second worker that took
    # the job over meanwhile and runs it again
    first = workers.start("--lease", "2", "--concurrency", "1")
    await producer.publish("echo", {"sleep_s": 10}, id="twice")
    await wait_until(lambda: _status_is(redis, keys, "twice", "running"), timeout=15, what="the job to start")
    first_name = await redis.hget(keys.job("twice"), "worker")
    os.kill(first.pid, signal.SIGSTOP)
    try:
        second = workers.start("--lease", "2", "--concurrency", "1")

        async def taken_over() -> bool:
            return await redis.hget(keys.job("twice"), "worker") not in (None, first_name)

        await wait_until(taken_over, timeout=30, what="the second worker to take the job over")
        second_name = await redis.hget(keys.job("twice"), "worker")
        # The pause goes on 3 s past the take-over (the scenario, not a synchronisation): whichever run began
        # first then ends first by seconds, well apart from the other and its renewals (every 0.5 s)
        await asyncio.sleep(PAUSED_PAST_TAKE_OVER_S)
    finally:
        os.kill(first.pid, signal.SIGCONT)
    # When one run ends the job: usually the first, resumed; the second when the pause came before the first had
    # read start.lua's reply (the record said running, but its run began only once it was resumed, after the other)
    (result,) = await wait_results(redis, keys, 1, timeout=30)
    assert result.id == "twice" and result.status == "completed" and result.worker in (first_name, second_name), result
    # both runs counted, whichever ended it: the take-over's attempt stands in the event and the record
    assert result.attempts == 2 and await redis.hget(keys.job("twice"), "attempts") == "2", result
    winner, loser = (first, second) if result.worker == first_name else (second, first)
    loser_name = second_name if loser is second else first_name
    # Then the other worker stops its own run at its next renewal (its result would be fenced off) and says why,
    # which frees its one slot for the next job; the first warned at most once that the job was taken over (not at
    # all when it woke up past the job's end on a slow machine: its run ended before a renewal came)
    await asyncio.to_thread(wait_for_log, loser, "stopped: another worker took it over", timeout=30)
    assert re.search(r"job=twice agent=echo attempt=\d+ stopped: .* the job has ended \(status completed\)", loser.log_text()), loser.log_text()[-3000:]
    assert first.log_text().count("entries still at work here were taken over by another consumer") <= 1, first.log_text()[-3000:]
    winner.kill()
    await producer.publish("echo", {}, id="next")
    got = await wait_results(redis, keys, 2, timeout=15)
    assert [r.id for r in got] == ["twice", "next"] and got[1].worker == loser_name, got
    assert "outcome=fenced" not in loser.log_text()


async def test_a_dead_workers_jobs_are_reclaimed_before_a_steady_backlog_drains(redis, keys: Keys, producer, workers) -> None:
    # Given a worker (5 slots, 2 s lease) SIGKILLed while running five 2-second jobs, and behind them a backlog of
    # 300 short jobs
    doomed = workers.start("--concurrency", "5", "--lease", "2")
    await producer.publish_many([JobRequest(agent="echo", data={"sleep_s": 2}, id=f"held-{i}") for i in range(5)])
    await wait_until(lambda: _count_running_ids(redis, keys, [f"held-{i}" for i in range(5)]), timeout=15, what="5 jobs running")
    doomed.kill()
    await producer.publish_many([JobRequest(agent="echo", data={"sleep_s": 0.2}, id=f"b{i}") for i in range(300)])
    # When another worker with 5 slots works through the backlog, each freed slot refilled at once
    survivor = workers.start("--concurrency", "5", "--lease", "2")

    # Then its five jobs, older than the backlog, are reclaimed and completed while the backlog still waits (before,
    # the sweep took stalled entries only into free slots, which a steady backlog never leaves)
    async def held_done() -> bool:
        return all([await redis.hget(keys.job(f"held-{i}"), "status") == "completed" for i in range(5)])

    await wait_until(held_done, timeout=60, what="the dead worker's five jobs to complete")
    (group,) = [g for g in await redis.xinfo_groups(keys.lane("normal")) if g["name"] == "workers"]
    assert group["lag"] > 0, f"the backlog drained first: {group}"
    # by the survivor's sweeps: one, or two when the dead worker had claimed them in two reads (their leases then
    # run out a moment apart, and the later ones are past it only at the next sweep)
    swept = re.findall(r"reclaimed \d+ normal entries idle past the lease \(their consumer died or hung\): jobs ([^\n]*)", survivor.log_text())
    assert sorted(job for line in swept for job in line.split(", ")) == [f"held-{i}" for i in range(5)], survivor.log_text()[-3000:]


async def _count_running_ids(redis, keys: Keys, ids: list[str]) -> bool:
    return [await redis.hget(keys.job(i), "status") for i in ids].count("running") == len(ids)


async def test_live_runs_are_not_taken_over_after_redis_comes_back_from_an_outage_longer_than_the_lease(
    workers, redis_binary: str, tmp_path,  # type: ignore[no-untyped-def]
) -> None:
    # Given a Redis of its own that keeps its data (AOF), two workers with a 2 s lease, and 20 jobs of 12 s, each allowed
    # one attempt, all running
    port = free_port()
    command = [redis_binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path), "--save", "",
               "--appendonly", "yes", "--appendfsync", "always"]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    redis = Redis.from_url(url, decode_responses=True)
    try:
        await wait_until(lambda: _answers(redis), timeout=10, what="the test's Redis to answer")
        env = {"STREAMCREW_REDIS_URL": url}
        for _ in range(2):
            workers.start("--lease", "2", "--concurrency", "20", env=env)
        keys = Keys(workers.prefix)
        for i in range(20):
            await redis.xadd(keys.lane("normal"), {"agent": "echo", "data": '{"sleep_s": 12}', "id": f"long-{i}", "max_attempts": "1"})

        async def all_running() -> bool:
            return all([await redis.hget(keys.job(f"long-{i}"), "status") == "running" for i in range(20)])

        await wait_until(all_running, timeout=20, what="the 20 jobs to run")
        # When Redis dies and comes back 5 s later with its data: every entry's idle time then spans the outage
        server.kill()
        server.wait(timeout=10)
        await asyncio.sleep(5)  # the outage itself, longer than the lease (the scenario, not a synchronisation)
        server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        await wait_until(lambda: _answers(redis), timeout=20, what="the test's Redis to answer again")
        # Then no live run was taken over: every job completed in its one attempt (before: the first sweep back could
        # beat its owner's renewal, take the job over, and end it failed, "attempts exhausted")
        got = {r.id: r for r in await wait_results(redis, keys, 20, timeout=60)}
        assert {r.status for r in got.values()} == {"completed"}, {i: (r.status, r.error) for i, r in got.items() if r.status != "completed"}
        assert {r.attempts for r in got.values()} == {1}
    finally:
        await redis.aclose()
        server.kill()
        server.wait(timeout=10)


async def _answers(redis) -> bool:  # type: ignore[no-untyped-def]
    try:
        return bool(await redis.ping())
    except Exception:  # noqa: BLE001 - not up yet
        return False
