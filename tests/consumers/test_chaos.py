"""Chaos: workers SIGKILLed and replaced under load; every job yields exactly one result."""

import asyncio
import time
from collections import Counter

from streams.envelope import JobRequest
from streams.keys import Keys
from tests.support import results, wait_until

JOBS = 2000
KILL_EVERY_S = 1.5
CHAOS_FOR_S = 10.0


async def test_three_workers_killed_and_replaced_lose_and_duplicate_nothing(redis, keys: Keys, producer, workers, capsys) -> None:
    # Given 3 workers with a 2 s lease and 2,000 jobs of 0.2 s each (about 13 s of work)
    args = ("--concurrency", "10", "--lease", "2")
    live = [workers.start(*args) for _ in range(3)]
    await producer.publish_many([JobRequest(agent="echo", data={"sleep_s": 0.2, "i": i}, id=f"c{i}", max_attempts=10) for i in range(JOBS)])
    # When one worker is SIGKILLed every ~1.5 s for 10 s and replaced
    t0 = time.monotonic()
    kills = 0
    while (next_kill := t0 + KILL_EVERY_S * (kills + 1)) <= t0 + CHAOS_FOR_S:
        await asyncio.sleep(max(0.0, next_kill - time.monotonic()))  # the chaos schedule itself, not a synchronisation
        victim = live.pop(0)  # the oldest: it has claimed jobs by now
        await asyncio.to_thread(victim.kill)
        kills += 1
        live.append(workers.start(*args, wait_ready=False))

    async def all_done() -> bool:
        return int(await redis.xlen(keys.results)) >= JOBS

    await wait_until(all_done, timeout=90, what=f"{JOBS} results")
    elapsed = time.monotonic() - t0
    got = await results(redis, keys)
    counts = Counter(r.id for r in got)
    duplicated = [i for i, n in counts.items() if n > 1]
    lost = {f"c{i}" for i in range(JOBS)} - set(counts)
    attempts = Counter(r.attempts for r in got)
    with capsys.disabled():
        print(f"\nchaos: {JOBS} jobs, {kills} SIGKILLs, {len(got)} results, {len(counts)} distinct, "
              f"{len(lost)} lost, {len(duplicated)} duplicated, attempts histogram {dict(sorted(attempts.items()))}, {elapsed:.1f}s")
    # Then 2,000 distinct results, none lost, none duplicated, all completed
    assert not lost, sorted(lost)[:10]
    assert not duplicated, duplicated[:10]
    assert len(got) == JOBS
    assert all(r.status == "completed" for r in got)
    assert kills >= 6
    assert max(attempts) > 1, "no job was ever reclaimed: the chaos did not hit running jobs"
