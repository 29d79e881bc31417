"""STREAMCREW_TENANT_MAX_RUNNING: one tenant's flood of slow jobs takes at most its cap of the fleet's slots.

Real workers on a real Redis; what ran when is read from the result events (each job's run is the span between its
``started_at`` and ``finished_at``, both taken on the one worker's clock).
"""

from __future__ import annotations

import asyncio
import os
import subprocess

import orjson
import redis as sync_redis
from redis.asyncio import Redis

from consumers.gateway.responses import job_view
from consumers.monitor import report_rows
from consumers.processes import streamcrew_cmd
from streams.dead import replay
from streams.embedded import RedisServer
from streams.envelope import JobRequest
from streams.keys import Keys
from streams.producer import Producer
from streams.records import get_job
from streams.stats import queue_stats
from streams.tenant_cap import caps_key, parked_key, parked_tenants_key, running_key
from tests.support import WorkerFactory, most_at_once, wait_results, wait_until

CAP = {"STREAMCREW_TENANT_MAX_RUNNING": "2"}


async def test_a_flooding_tenant_runs_at_most_its_cap_and_another_tenant_goes_ahead(redis, keys: Keys, producer, workers) -> None:
    # Given one worker of 10 slots, tenant A capped at 2 running jobs
    workers.start("--concurrency", "10", env=CAP)
    # When A submits 30 slow jobs, then B submits one
    await producer.publish_many([JobRequest(agent="echo", data={"sleep_s": 0.3}, id=f"a{i}", tenant="A") for i in range(30)])
    await wait_until(lambda: _parked(redis, keys, "A", 20), timeout=15, what="A's backlog parked")
    figures = await queue_stats(redis, keys, window=None)  # what `streamcrew stats` shows
    assert figures["parked"] >= 10 and figures["parked_by_tenant"] == {"A": figures["parked"]}, figures
    last = orjson.loads(await redis.lindex(parked_key(keys, "A"), -1))["id"]  # the last parked: still parked now
    assert job_view(await get_job(redis, keys, last))["parked"] is True  # what GET /jobs/{id} shows
    await producer.publish("echo", {"sleep_s": 0.3}, id="b0", tenant="B")
    got = await wait_results(redis, keys, 31, timeout=60)
    # Then B's job completed long before A's backlog, never more than 2 of A's ran at once, and parking cost no attempt
    by_id = {r.id: r for r in got}
    assert len(by_id) == 31 and all(r.status == "completed" for r in got), got
    a = [by_id[f"a{i}"] for i in range(30)]
    assert most_at_once([(r.started_at, r.finished_at) for r in a]) <= 2
    assert all(r.attempts == 1 for r in a), [(r.id, r.attempts) for r in a]
    done_before_b = sum(1 for r in a if r.finished_at <= by_id["b0"].finished_at)
    assert done_before_b <= 10, f"B's job waited for {done_before_b} of A's 30"
    # And nothing is left parked or holding a slot
    assert "parked" not in job_view(await get_job(redis, keys, last))
    assert await redis.llen(parked_key(keys, "A")) == 0
    assert await redis.zcard(running_key(keys, "A")) == 0
    assert await redis.hlen(parked_tenants_key(keys)) == 0


async def _parked(redis, keys: Keys, tenant: str, n: int) -> bool:
    return int(await redis.llen(parked_key(keys, tenant))) >= n


async def _running(redis, keys: Keys, ids: list[str], n: int) -> bool:
    statuses = [await redis.hget(keys.job(i), "status") for i in ids]
    return statuses.count("running") == n


async def _two_running_rest_parked(redis, keys: Keys, producer, workers, ids: list[str], *, lease: str, sleep_s: float):
    """A worker (cap 2) running 2 of tenant A's jobs ``ids``, the rest parked: the worker's process."""
    worker = workers.start("--concurrency", "10", "--lease", lease, env=CAP)
    await producer.publish_many([JobRequest(agent="echo", data={"sleep_s": sleep_s}, id=i, tenant="A") for i in ids])
    await wait_until(lambda: _parked(redis, keys, "A", len(ids) - 2), timeout=15, what=f"{len(ids) - 2} of A's jobs parked")
    await wait_until(lambda: _running(redis, keys, ids, 2), timeout=15, what="2 of A's jobs running")
    return worker


async def test_a_sigkilled_worker_leaks_no_slot_and_strands_no_parked_job(redis, keys: Keys, producer, workers) -> None:
    # Given a worker with a 2 s lease running 2 of tenant A's 10 jobs, the other 8 parked
    ids = [f"k{i}" for i in range(10)]
    victim = await _two_running_rest_parked(redis, keys, producer, workers, ids, lease="2", sleep_s=3)
    # When it is SIGKILLed mid-job and another worker starts
    victim.kill()
    workers.start("--concurrency", "10", "--lease", "2", env=CAP)
    # Then every job completes exactly once, and nothing stays parked or holds a slot
    got = await wait_results(redis, keys, 10, timeout=90)
    await asyncio.sleep(0.5)  # a duplicate result would come in the next moments; then the count is checked again
    got = await wait_results(redis, keys, 10, timeout=1)
    assert sorted(r.id for r in got) == sorted(ids) and all(r.status == "completed" for r in got), got
    # (the two cut short ran again, on a second attempt: their started_at is their first start, so only the others' spans tell)
    assert sum(1 for r in got if r.attempts == 2) <= 2 and all(r.attempts <= 2 for r in got), [(r.id, r.attempts) for r in got]
    assert most_at_once([(r.started_at, r.finished_at) for r in got if r.attempts == 1]) <= 2
    assert await redis.llen(parked_key(keys, "A")) == 0
    assert await redis.hlen(parked_tenants_key(keys)) == 0
    assert await redis.zcard(running_key(keys, "A")) == 0


async def test_slots_whose_runs_vanished_expire_and_the_upkeep_unparks(redis, keys: Keys, producer, workers) -> None:
    # Given a worker with a 1 s lease running 2 of tenant A's 6 jobs, 4 parked, when it is SIGKILLed and its two
    # entries are dropped from the group (so no reclaim and no settle ever frees those two slots)
    ids = [f"u{i}" for i in range(6)]
    victim = await _two_running_rest_parked(redis, keys, producer, workers, ids, lease="1", sleep_s=30)
    victim.kill()
    lost = [i for i in ids if await redis.hget(keys.job(i), "status") == "running"]
    pending = await redis.xpending_range(keys.lane("normal"), "workers", min="-", max="+", count=100)
    await redis.xack(keys.lane("normal"), "workers", *[p["message_id"] for p in pending])
    # When another worker runs (its parked jobs now shorter: the test replaces their data)
    for i in ids:
        if i not in lost:
            await _shorten_parked(redis, keys, i)
    workers.start("--concurrency", "10", "--lease", "1", env=CAP)
    # Then the slots expire and the upkeep un-parks the 4, which complete
    got = await wait_results(redis, keys, 4, timeout=60)
    assert sorted(r.id for r in got) == sorted(set(ids) - set(lost)), got
    assert await redis.llen(parked_key(keys, "A")) == 0


async def test_a_parked_job_let_go_runs_ahead_of_the_backlog_in_its_lane(redis, keys: Keys, producer, workers) -> None:
    # Given one worker of 4 slots, tenant A capped at 1: A's two jobs (the second is parked), then 40 half-second jobs of
    # other tenants in the same lane (~5 s of backlog)
    workers.start("--concurrency", "4", env={"STREAMCREW_TENANT_MAX_RUNNING": "1"})
    await producer.publish_many([JobRequest(agent="echo", data={"sleep_s": 0.3}, id="a0", tenant="A"),
                                 JobRequest(agent="echo", data={"sleep_s": 0.05}, id="a1", tenant="A")]
                                + [JobRequest(agent="echo", data={"sleep_s": 0.5}, id=f"b{i}") for i in range(40)])
    # When a0 ends and a1 is let go from A's parked list
    got = await wait_results(redis, keys, 42, timeout=60)
    by_id = {r.id: r for r in got}
    # Then a1 ran next, ahead of the 40 behind it in the lane (which it had waited for once), on its one attempt: A's slot
    # was not held idle for it while a whole backlog went by (A ran 1 job per backlog, not 1 at a time)
    assert len(by_id) == 42 and all(r.status == "completed" for r in got), got
    ahead = sum(1 for i in range(40) if by_id[f"b{i}"].started_at < by_id["a1"].started_at)
    assert ahead <= 12, f"a1 started after {ahead} of the 40 jobs sent after it"
    assert by_id["a1"].attempts == 1 and by_id["a1"].started_at >= by_id["a0"].finished_at
    assert await redis.zcard(running_key(keys, "A")) == 0


async def test_a_job_let_go_that_dies_is_replayed_into_its_lane(redis, keys: Keys, producer, workers) -> None:
    # Given tenant A capped at 1, and A's second job (parked, then let go) failing its one attempt: a dead letter
    workers.start("--concurrency", "4", env={"STREAMCREW_TENANT_MAX_RUNNING": "1"})
    await producer.publish_many([JobRequest(agent="echo", data={"sleep_s": 0.3}, id="d0", tenant="A"),
                                 JobRequest(agent="echo", data={"fail_first": 1}, id="d1", tenant="A", max_attempts=1)])
    got = await wait_results(redis, keys, 2, timeout=30)
    assert {r.id: r.status for r in got} == {"d0": "completed", "d1": "failed"}, got
    ((entry, letter),) = await redis.xrange(keys.dead)
    assert letter["source_stream"] == keys.resumed("normal")
    # When it is replayed, Then it runs again, from its lane, and completes
    assert (await replay(redis, keys, entry)).job_id == "d1"
    got = await wait_results(redis, keys, 3, timeout=30)
    assert [r.status for r in got if r.id == "d1"] == ["failed", "completed"], got
    assert await redis.xlen(keys.dead) == 0


async def test_a_job_let_go_behind_a_backlog_longer_than_its_reservation_keeps_its_slot(redis, keys, producer, workers) -> None:
    # Given a worker of 4 slots with a 0.4 s lease (a let-go job's reservation: 5 leases, 2 s), tenant A capped at 1:
    # A's 4 jobs in the normal lane (the first, of 1 s, runs; 3 are parked)
    workers.start("--concurrency", "4", "--lease", "0.4", env={"STREAMCREW_TENANT_MAX_RUNNING": "1"})
    ids = [f"r{i}" for i in range(4)]
    await producer.publish_many([JobRequest(agent="echo", data={"sleep_s": 1 if i == "r0" else 0.05}, id=i, tenant="A") for i in ids])
    await wait_until(lambda: _parked(redis, keys, "A", 3), timeout=15, what="r1, r2 and r3 parked")
    # When 30 one-second jobs of other tenants fill the high lane (~7 s of backlog), r0 ends and r1 is let go: it waits
    # behind the high lane, holding A's slot as a reservation
    await producer.publish_many([JobRequest(agent="echo", data={"sleep_s": 1}, id=f"b{i}") for i in range(30)], priority="high")
    running = running_key(keys, "A")
    await wait_until(lambda: _holds(redis, running, "r1"), timeout=15, what="r1 let go, holding A's slot")
    reserved_until = await redis.zscore(running, "r1")
    figures = await queue_stats(redis, keys)  # what `streamcrew stats` and `streamcrew monitor` show
    depth = dict(report_rows(figures))["Queue Depth"]
    assert figures["resumed"] == 1 and "resumed 1" in depth, figures
    assert figures["parked"] == 2 and "parked 2" in depth, (depth, figures)  # r2 and r3 wait too
    # Then once the reservation ran out (the upkeep looks every second) r1 still holds the slot, since it still waits to
    # be read: the upkeep did not give it to r2 (r1, reaching a worker, would have been parked again behind r3)
    await wait_until(lambda: _looked_at_again(redis, running, "r1", reserved_until), timeout=10,
                     what="the upkeep to look at r1's slot again once its reservation ran out")
    assert await redis.hget(keys.job("r1"), "status") == "queued", "the high lane's backlog must outlast r1's reservation"
    assert await redis.zrange(running, 0, -1) == ["r1"]
    assert await redis.llen(parked_key(keys, "A")) == 2  # r2 and r3
    # And every job completes once, A's on one attempt each and in the order they were sent
    got = await wait_results(redis, keys, 34, timeout=90)
    a = sorted((r for r in got if r.id in ids), key=lambda r: r.started_at)
    assert [r.id for r in a] == ids and all(r.status == "completed" and r.attempts == 1 for r in a), a
    assert len({r.id for r in got}) == 34


async def _holds(redis, running: str, job_id: str) -> bool:
    return await redis.zscore(running, job_id) is not None


async def _looked_at_again(redis, running: str, job_id: str, deadline: float) -> bool:
    """The member's deadline was pushed back (checked and kept) or the member is gone (dropped)."""
    score = await redis.zscore(running, job_id)
    return score is None or score > deadline


async def _shorten_parked(redis, keys: Keys, job_id: str) -> None:
    """Rewrite a parked item's data to a 0.1 s sleep: the upkeep checks the record against the item's hash, so the
    record's source is rewritten to match."""
    import hashlib

    items = await redis.lrange(parked_key(keys, "A"), 0, -1)
    for n, item in enumerate(items):
        parsed = orjson.loads(item)
        if parsed["id"] != job_id:
            continue
        fields = parsed["fields"]
        fields[fields.index("data") + 1] = '{"sleep_s": 0.1}'
        new = orjson.dumps(parsed).decode()
        await redis.lset(parked_key(keys, "A"), n, new)
        await redis.hset(keys.job(job_id), "source", "parked:" + hashlib.sha1(new.encode()).hexdigest())


async def test_a_workflows_steps_are_capped_and_all_complete(redis, keys: Keys, producer, workers) -> None:
    # Given one worker of 10 slots, tenant A capped at 2
    workers.start("--concurrency", "10", env=CAP)
    # When A's workflow fans out to 6 parallel slow steps
    steps = [{"id": f"s{i}", "agent": "echo", "data": {"sleep_s": 0.3}} for i in range(6)]
    await producer.publish("workflow", {"steps": steps}, id="wf", tenant="A")
    got = await wait_results(redis, keys, 7, timeout=60)
    # Then every step and the workflow completed, never more than 2 steps at once
    by_id = {r.id: r for r in got}
    assert by_id["wf"].status == "completed", by_id["wf"]
    spans = [(r.started_at, r.finished_at) for r in got if r.id != "wf"]
    assert len(spans) == 6 and all(r.status == "completed" and r.tenant == "A" for r in got), got
    assert most_at_once(spans) <= 2


async def test_without_a_cap_start_and_settle_call_no_sorted_set(own_redis: RedisServer, tmp_path) -> None:
    # Given a worker with no cap on a Redis of the test's own, its statistics reset
    keys = Keys("nocap")
    factory = WorkerFactory(own_redis.url, keys.prefix, tmp_path)
    redis = Redis.from_url(own_redis.url, decode_responses=True)
    try:
        factory.start("--concurrency", "20")
        with sync_redis.Redis.from_url(own_redis.url) as admin:
            admin.config_resetstat()
        # When it runs 200 no-op jobs of tenants
        await Producer(redis, keys).publish_many([JobRequest(agent="echo", data={}, tenant=f"t{i % 3}") for i in range(200)])
        await wait_results(redis, keys, 200, timeout=60)
        with sync_redis.Redis.from_url(own_redis.url) as admin:
            stats = admin.info("commandstats")
    finally:
        factory.close()
        await redis.aclose()
    # Then no script touched a sorted set of slots (ZADD, ZREM, ZCARD: the cap's work), nor called TIME for it
    assert not {"cmdstat_zrem", "cmdstat_zcard", "cmdstat_zremrangebyscore", "cmdstat_rpush"} & set(stats), sorted(stats)
    assert "cmdstat_zadd" not in stats, stats.get("cmdstat_zadd")


async def test_a_worker_given_another_cap_than_a_live_one_warns_naming_it(redis, keys: Keys, workers) -> None:
    # Given a worker capping every tenant at 2, registered where workers compare their caps
    agreed = caps_key(keys)
    workers.start(env=CAP)
    await wait_until(lambda: _heard_from(redis, agreed, 1), timeout=15, what="the first worker's cap registered")
    # When a second worker starts with another value, and a third with the first's
    odd = workers.start(env={"STREAMCREW_TENANT_MAX_RUNNING": '{"*": 2, "acme": 50}'})
    await wait_until(lambda: _heard_from(redis, agreed, 2), timeout=15, what="the second worker's cap registered")
    same = workers.start(env=CAP)
    await wait_until(lambda: _heard_from(redis, agreed, 3), timeout=15, what="the third worker's cap registered")
    # Then the second warns, naming the first and its value; the third warns naming only the second
    names = {v.split("|", 1)[1]: k for k, v in (await redis.hgetall(agreed)).items()}
    await wait_until(lambda: "disagree on STREAMCREW_TENANT_MAX_RUNNING" in odd.log_text(), timeout=15, what="the second worker's warning")
    warned = next(line for line in odd.log_text().splitlines() if "disagree" in line)
    assert '{"*":2,"acme":50}' in warned and '{"*":2}' in warned, warned
    await wait_until(lambda: "disagree on STREAMCREW_TENANT_MAX_RUNNING" in same.log_text(), timeout=15, what="the third worker's warning")
    third = next(line for line in same.log_text().splitlines() if "disagree" in line)
    assert '{"*":2,"acme":50}' in third and "1 other live worker" in third, same.log_text()[-2000:]
    assert names['{"*":2,"acme":50}'] in third, (names, third)


async def _heard_from(redis, key: str, n: int) -> bool:
    return int(await redis.hlen(key)) >= n


def test_an_invalid_cap_is_refused_at_start_up() -> None:
    for bad, said in (("-1", "integer >= 0"), ("lots", "integer or a JSON object"), ('{"acme": "x"}', "STREAMCREW_TENANT_MAX_RUNNING['acme']"),
                      ("[1, 2]", "must be an object")):
        run = subprocess.run([*streamcrew_cmd("worker"), "--metrics-port", "0", "--redis-url", "redis://127.0.0.1:1/0"],
                             capture_output=True, text=True, timeout=60, env={**os.environ, "STREAMCREW_TENANT_MAX_RUNNING": bad})
        assert run.returncode != 0 and said in run.stderr + run.stdout, (bad, run.stderr[-2000:])


async def test_a_drained_worker_hands_back_its_capped_jobs_and_strands_nothing(redis, keys: Keys, producer, workers) -> None:
    # Given a worker running 2 of tenant A's 6 jobs, 4 parked
    ids = [f"d{i}" for i in range(6)]
    first = workers.start("--concurrency", "10", "--grace", "0.5", env=CAP)
    await producer.publish_many([JobRequest(agent="echo", data={"sleep_s": 2}, id=i, tenant="A") for i in ids])
    await wait_until(lambda: _parked(redis, keys, "A", 4), timeout=15, what="4 of A's jobs parked")
    await wait_until(lambda: _running(redis, keys, ids, 2), timeout=15, what="2 of A's jobs running")
    # When it drains (SIGTERM) and another worker starts
    first.terminate()
    assert await asyncio.to_thread(first.wait, 20) == 0
    assert "2 handed back" in first.log_text(), first.log_text()[-2000:]
    workers.start("--concurrency", "10", env=CAP)
    # Then every job completes once, on one counted attempt, and nothing stays parked or holds a slot
    got = await wait_results(redis, keys, 6, timeout=60)
    assert sorted(r.id for r in got) == sorted(ids) and all(r.status == "completed" and r.attempts == 1 for r in got), got
    assert await redis.llen(parked_key(keys, "A")) == 0
    assert await redis.zcard(running_key(keys, "A")) == 0


def test_the_gateways_queue_stats_declare_parked() -> None:
    # GET /queue/stats passes `parked` on; its OpenAPI schema must say what it is, not leave it to extra fields
    from consumers.gateway.models import JobView, QueueStats
    assert "parked" in JobView.model_json_schema()["properties"]
    assert "parked" in QueueStats.model_json_schema()["properties"]
    assert "parked" in QueueStats.model_json_schema()["required"]


async def test_the_upkeep_writes_nothing_for_tenants_whose_parked_jobs_do_not_fit(redis, keys: Keys, own_redis: RedisServer) -> None:
    """It looks at every tenant with jobs parked each second: each write went to the replicas and the AOF, 10,000 a
    second for 10,000 tenants parked, nothing moving."""
    from streams.scripts import Scripts

    # Given 50 tenants at their cap of 1 (a run holding each slot for a minute), each with 2 jobs parked
    client = Redis.from_url(own_redis.url, decode_responses=True)
    try:
        later = (await client.time())[0] * 1000 + 60_000
        for i in range(50):
            tenant = f"t{i}"
            await client.zadd(running_key(keys, tenant), {f"run-{i}": later})
            await client.rpush(parked_key(keys, tenant), *[orjson.dumps({"lane": "normal", "id": f"p-{i}-{n}", "fields": ["agent", "echo"]}).decode() for n in range(2)])
            await client.hset(parked_tenants_key(keys), tenant, 2)
        async def writes() -> int:  # the script's nested writes, as Redis counts each command
            stats = await client.info("commandstats")
            return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in ("hset", "hdel", "zadd", "xadd", "lpop"))
        before = await writes()
        # When the upkeep looks at them (nothing fits)
        moved = await Scripts(client).unpark(keys=[keys.slot_guard], args=[keys.job_prefix, f"{keys.prefix}:requests:", 5000, 500, 1, "{}"])
        # Then nothing moved and nothing was written
        assert moved == 0
        assert await writes() == before
        assert await client.hget(parked_tenants_key(keys), "t7") == "2"
    finally:
        await client.aclose()


async def test_jobs_a_removed_cap_left_parked_go_back_in_one_upkeep_round(redis, keys: Keys) -> None:
    """With no cap set, one call lets go at most 500 a tenant, and the upkeep looked every 10 s: 100,000 jobs a cap
    had parked took 33 minutes to go back while the workers sat idle."""
    from streams.scripts import Scripts
    from streams.tenant_cap import TenantCapper

    # Given 1,700 jobs of tenant A parked by a cap since removed
    items = [orjson.dumps({"lane": "normal", "id": f"p-{n}", "fields": ["agent", "echo", "data", "{}", "id", f"p-{n}"]}).decode()
             for n in range(1700)]
    for start in range(0, len(items), 500):
        await redis.rpush(parked_key(keys, "A"), *items[start:start + 500])
    await redis.hset(parked_tenants_key(keys), "A", len(items))
    capper = TenantCapper(Scripts(redis), None, worker="w", home=keys, partitions=1, lease_s=30)
    # When the upkeep's round comes, Then they all go back to the lane's resumed stream at once
    assert capper.unpark_due()
    assert await capper.unpark(keys) == 1700
    assert await redis.xlen(f"{keys.lane_prefix}resumed-normal") == 1700 and not await redis.exists(parked_key(keys, "A"))
    # And with jobs moving, it looks again in a second (not the 10 s of a partition with nothing parked)
    assert capper._moving
