"""Every process of a prefix uses the same STREAMCREW_PARTITIONS (contract §10): the first records it in
``<prefix>:partitions``; one with another N is refused with a clear error before it publishes or reads,
instead of publishing into lanes no worker reads (or reading lanes no producer fills) without a word."""

from __future__ import annotations

import os
import subprocess

import pytest

from consumers.processes import streamcrew_cmd
from streams.errors import ConfigError
from streams.keys import Keys, partition_keys
from streams.layout import layout_key
from streams.producer import Producer
from tests.consumers.test_cli import cli
from tests.support import WorkerFactory

N = 6


def run_process(redis_url: str, prefix: str, command: str, partitions: int) -> subprocess.CompletedProcess[str]:
    """A long-running process (worker, gateway) that should exit at once: its exit code and output."""
    env = {**os.environ, "STREAMCREW_REDIS_URL": redis_url, "STREAMCREW_PREFIX": prefix, "STREAMCREW_PARTITIONS": str(partitions),
           "STREAMCREW_METRICS_PORT": "0", "STREAMCREW_PORT": "0"}
    try:
        return subprocess.run(streamcrew_cmd(command), capture_output=True, text=True, timeout=60, env=env)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"`streamcrew {command}` with {partitions} partitions kept running on a prefix of {N}: "
                             f"{exc.stderr!r}") from None


async def test_processes_with_another_partition_count_are_refused(redis, redis_url: str, prefix: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    keys = Keys(prefix)
    workers = WorkerFactory(redis_url, prefix, tmp_path, env={"STREAMCREW_PARTITIONS": str(N)})
    try:
        # Given a worker of 6 partitions on a new prefix: it records 6
        workers.start()
        assert await redis.get(layout_key(keys)) == "6"
        # When a submit, stats, a worker and a gateway come with the default 1 partition
        submitted = cli(redis_url, prefix, "submit", "echo", "--data", "{}")
        stats = cli(redis_url, prefix, "stats", "--json")
        worker = run_process(redis_url, prefix, "worker", 1)
        gateway = run_process(redis_url, prefix, "gateway", 1)
        # Then each exits 2 saying why, and nothing went into the lanes of one partition that no worker reads
        for name, done in (("submit", submitted), ("stats", stats), ("worker", worker), ("gateway", gateway)):
            assert done.returncode == 2, f"{name}: exit {done.returncode}\n{done.stdout}\n{done.stderr[-2000:]}"
            text = " ".join(done.stderr.split())
            assert "laid out in 6 partition(s)" in text and "STREAMCREW_PARTITIONS=1" in text, f"{name}: {done.stderr[-2000:]}"
        assert [await redis.exists(keys.lane(lane)) for lane in ("high", "normal", "low")] == [0, 0, 0]
        # And with the same N they work
        ok = cli(redis_url, prefix, "submit", "echo", "--data", "{}", "--wait", "--timeout", "20", env={"STREAMCREW_PARTITIONS": str(N)})
        assert ok.returncode == 0, ok.stderr
        assert cli(redis_url, prefix, "stats", "--json", env={"STREAMCREW_PARTITIONS": str(N)}).returncode == 0
    finally:
        workers.close()


async def test_a_library_producer_with_another_partition_count_raises_and_publishes_nothing(redis, prefix: str) -> None:  # type: ignore[no-untyped-def]
    keys = Keys(prefix)
    await Producer(redis, keys, partitions=4).publish("echo", {})  # the first producer records 4
    with pytest.raises(ConfigError, match=r"laid out in 4 partition\(s\).*STREAMCREW_PARTITIONS=2"):
        await Producer(redis, keys, partitions=2).publish("echo", {})
    lengths = [await redis.xlen(k.lane("normal")) for k in partition_keys(keys, 4)]
    assert sum(lengths) == 1, f"only the first producer's job is in the lanes: {lengths}"


async def test_a_worker_of_a_partitioned_prefix_says_which_unpartitioned_lanes_hold_entries(redis, redis_url: str, prefix: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # Given a raw XADD to contract §1's lane of a prefix laid out in 3 partitions (where §10's keys were meant)
    keys = Keys(prefix)
    await redis.xadd(keys.lane("normal"), {"agent": "echo", "data": "{}"})
    workers = WorkerFactory(redis_url, prefix, tmp_path, env={"STREAMCREW_PARTITIONS": "3"})
    try:
        # When a worker starts, Then it says so, naming the lane and where its entries belong (before: not a word,
        # and nothing read them)
        text = workers.start().log_text()
        assert f"{keys.lane('normal')} holds 1 entries that no worker reads" in text, text[-2000:]
        assert f"{prefix}:{{<p>}}:requests:normal (p = 0..2)" in text, text[-2000:]
        assert f"{keys.lane('high')} holds" not in text
    finally:
        workers.close()
