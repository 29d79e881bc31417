"""A promoted replica reports the groups' lag as it is: KEDA's lag triggers, `stats` and the lag alerts read it.

Redis before 7.2.4 does not send replicas the read counter (entries-read) that XREADGROUP moves
(redis/redis#12898): a replica promoted after a run reports the whole run as lag, and keeps
doing so, though nothing waits. A worker's upkeep (trim.lua, trim_results.lua) sets it right.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from redis.asyncio import Redis

from streams.connection import connect
from streams.envelope import JobRequest
from streams.keys import Keys
from streams.producer import Producer
from streams.stats import queue_stats
from tests.support import Replicated, WorkerFactory, replica_caught_up, wait_results, wait_until

JOBS = 40


async def lags(redis: Redis, keys: Keys) -> dict[str, int | None]:
    """XINFO GROUPS' lag of the workers' group on each lane and the notifier's on the results, as KEDA reads it."""
    out: dict[str, int | None] = {}
    for stream, group in [*((lane, "workers") for lane in keys.lanes), (keys.results, "notifier")]:
        for info in await redis.xinfo_groups(stream):
            if info["name"] == group:
                out[f"{stream}/{group}"] = info["lag"]
    return out


async def run(master: Redis, keys: Keys, name: str) -> None:
    """JOBS echo jobs done by the worker; their results read and acknowledged by the notifier group."""
    before = await master.xlen(keys.results)
    await Producer(master, keys).publish_many([JobRequest(agent="echo", data={"i": i}, id=f"{name}-{i}") for i in range(JOBS)])
    await wait_results(master, keys, before + JOBS, timeout=60)
    read = await master.xreadgroup("notifier", "n", {keys.results: ">"}, count=2 * JOBS)
    await master.xack(keys.results, "notifier", *[entry_id for entry_id, _ in read[0][1]])


async def full_resync(master: Redis, replica: Redis, master_port: int) -> None:
    """Make the replica sync in full (an RDB, which carries the groups' read counters), as a new or revived one does."""
    syncs = int((await master.info("stats"))["sync_full"])
    await replica.execute_command("REPLICAOF", "NO", "ONE")
    await replica.set("diverged", "1")  # its history no longer a prefix of the master's: no partial resync
    await replica.execute_command("REPLICAOF", "127.0.0.1", str(master_port))

    async def synced() -> bool:
        info = await replica.info("replication")
        return int((await master.info("stats"))["sync_full"]) > syncs and info.get("master_link_status") == "up"

    await wait_until(synced, timeout=30, what="the replica's full resync")
    await replica_caught_up(master)


@pytest.mark.timeout(180)
async def test_a_promoted_replica_reports_no_lag_once_a_worker_runs(replicated: Replicated, prefix: str, tmp_path: Path) -> None:
    keys = Keys(prefix)
    master, replica = connect(replicated.master.url), connect(replicated.replica_url)
    try:
        if int((await master.info("server"))["redis_version"].split(".")[0]) < 7:
            pytest.skip("XINFO GROUPS reports lag from Redis 7 on")
        # Given a worker on the master; a run, then a replica's full sync (a node started or restarted as a replica),
        # then another run: each run's results read and acknowledged by the notifier group
        await replica_caught_up(master)
        on_master = WorkerFactory(replicated.master.url, prefix, tmp_path)
        on_master.start("--concurrency", "10")
        try:
            await run(master, keys, "first")
            await full_resync(master, replica, replicated.master.port)
            await run(master, keys, "second")
        finally:
            on_master.close()
        assert set((await lags(master, keys)).values()) == {0}
        # When the replica, caught up, is promoted (as Sentinel or a cluster failover does)
        await replica_caught_up(master)
        await replica.execute_command("REPLICAOF", "NO", "ONE")
        before = await lags(replica, keys)
        print(f"lag on the promoted replica before any worker ran: {before}")
        # Then once a worker runs on it, every group's lag is 0 there, as `stats` reports it too
        on_replica = WorkerFactory(replicated.replica_url, prefix, tmp_path / "promoted")
        (tmp_path / "promoted").mkdir()
        on_replica.start("--concurrency", "10")
        try:

            async def no_lag() -> bool:
                return set((await lags(replica, keys)).values()) == {0}

            try:
                await wait_until(no_lag, timeout=30, what="every group's lag on the promoted replica to be 0")
            except AssertionError as exc:
                raise AssertionError(f"{exc}: {await lags(replica, keys)} (before a worker ran: {before})") from exc
            stats = await queue_stats(replica, keys)
            assert {name: lane["lag"] for name, lane in stats["lanes"].items()} == {"high": 0, "normal": 0, "low": 0}, stats
            assert stats["results"]["lag"] == 0, stats["results"]
        finally:
            on_replica.close()
        # And nothing was delivered again: the groups' last delivered IDs did not move back
        assert await replica.xlen(keys.results) == 2 * JOBS
        assert (await replica.xpending(keys.results, "notifier"))["pending"] == 0
    finally:
        await master.aclose()
        await replica.aclose()
