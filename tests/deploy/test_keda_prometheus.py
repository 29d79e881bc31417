"""The ScaledObjects' prometheus queries, run by a real Prometheus scraping real streamcrew processes.

The HPA that KEDA drives takes the maximum of its triggers' replica counts, so the sum over lanes and partitions has to
be one trigger's value: here a backlog spread over every lane and partition, and running jobs over a few, must read as
their sum (not the largest stream's, not counted once per process that exports the gauges).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from consumers.processes import Child, streamcrew_cmd
from streams.keys import LANES, WORKERS_GROUP, Keys, partition_keys
from tests.deploy.support import KEDA, KEDA_PARTITIONS, only
from tests.deploy.test_prometheus_server import PrometheusServer, ready, running_prometheus
from tests.support import start_serving_metrics, wait_until

PARTITIONS = 6
WAITING = 100  # undelivered entries in every lane of every partition: 3 x 6 x 100 = 1,800
RUNNING = {(0, "high"): 334, (1, "normal"): 333, (4, "low"): 333}  # claimed, not acknowledged: 10 busy workers' 1,000
RESUMED = {(3, "resumed-normal"): (50, 7)}  # (waiting, running)


def per_stream_ask() -> int:
    """The most replicas any one of keda.yaml's redis-streams triggers asks for, were these streams its."""
    streams = [t["metadata"] for t in only(KEDA, "ScaledObject")["spec"]["triggers"] if t["type"] == "redis-streams"]
    lag_count = min(int(m["lagCount"]) for m in streams if "lagCount" in m)
    pending_count = min(int(m["pendingEntriesCount"]) for m in streams if "pendingEntriesCount" in m)
    return max(max(math.ceil(lag / lag_count), math.ceil(pending / pending_count)) for lag, pending in plan().values())


def summed_triggers() -> list[dict[str, Any]]:
    """The prometheus triggers' metadata of both ScaledObjects."""
    found = [t["metadata"] for path in (KEDA, KEDA_PARTITIONS) for t in only(path, "ScaledObject")["spec"]["triggers"]
             if t["type"] == "prometheus"]
    assert len(found) == 2, "one prometheus trigger in each ScaledObject"
    return found


def plan() -> dict[tuple[int, str], tuple[int, int]]:
    """(partition, stream) -> (lag, pending) this test leaves in Redis."""
    lanes = {(p, lane): (WAITING, RUNNING.get((p, lane), 0)) for p in range(PARTITIONS) for lane in LANES}
    return {**lanes, **RESUMED}


def exporter(env: dict[str, str], log_path: Path) -> tuple[Child, int]:
    """A notifier serving the stream gauges on /metrics (it reads no lane), and its port."""
    return start_serving_metrics(lambda port: Child(streamcrew_cmd("notifier", "--metrics-port", str(port)), env=env, log_path=log_path))


async def settles(prometheus: PrometheusServer, query: str, want: float | None) -> None:
    """Wait until ``query`` has the value ``want`` (None: no value); fail with the last value seen."""
    last: list[float | None] = []

    async def reached() -> bool:
        last[:] = [await prometheus.scalar(query)]
        return last[0] == want

    try:
        await wait_until(reached, timeout=30, every=0.25, what=f"{query!r} to be {want}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last: {last[0] if last else 'not asked'}") from None


async def fill(redis: Any, keys: Keys) -> None:
    """Entries per :func:`plan`: the running ones added and read by a stand-in consumer first, then the waiting ones."""
    every = partition_keys(keys, PARTITIONS)
    for (p, name), (lag, pending) in plan().items():
        stream = every[p].lane_prefix + name
        await redis.xgroup_create(stream, WORKERS_GROUP, id="0", mkstream=True)
        pipe = redis.pipeline(transaction=False)
        for i in range(pending):
            pipe.xadd(stream, {"i": str(i)})
        await pipe.execute()
        if pending:
            read = await redis.xreadgroup(WORKERS_GROUP, "stand-in", {stream: ">"}, count=pending)
            assert len(read[0][1]) == pending
        pipe = redis.pipeline(transaction=False)
        for i in range(lag):
            pipe.xadd(stream, {"i": str(pending + i)})
        await pipe.execute()


async def test_the_summed_trigger_reads_the_sum_over_lanes_and_partitions(
    needs_redis7: None, redis: Any, keys: Keys, redis_url: str, prefix: str, prometheus_bin: str, tmp_path: Path,
) -> None:
    # Given 1,800 requests waiting over 3 lanes x 6 partitions, 1,000 running over three lanes, and a resumed stream
    # with 50 waiting and 7 running; two processes export the same stream gauges of them
    await fill(redis, keys)
    lags, pendings = zip(*plan().values(), strict=True)
    expected = sum(lags) + sum(pendings)
    assert expected == 2857 and max(lag + pending for lag, pending in plan().values()) == 434
    env = {"STREAMCREW_REDIS_URL": redis_url, "STREAMCREW_PREFIX": prefix, "STREAMCREW_PARTITIONS": str(PARTITIONS)}
    exporters: list[tuple[Child, int]] = []
    try:
        for i in range(2):
            exporters.append(exporter(env, tmp_path / f"notifier-{i}.log"))
        with running_prometheus(prometheus_bin, [port for _, port in exporters], tmp_path, job="streamcrew-notifier") as prometheus:
            await wait_until(lambda: ready(prometheus), timeout=30, what=f"prometheus to be ready; log:\n{prometheus.log()}")
            await settles(prometheus, f'count(count by (instance) (streamcrew_group_lag{{group="{WORKERS_GROUP}"}}))', 2)
            for trigger in summed_triggers():
                # When Prometheus runs the ScaledObject's query
                await settles(prometheus, trigger["query"], expected)
                # Then it is the sum over every lane, resumed stream and partition, each counted once: 29 replicas,
                # where the triggers per stream ask for 4 at most (334 running in one lane)
                assert math.ceil(expected / int(trigger["threshold"])) == 29 and per_stream_ask() == 4

            # And when no process is scraped any more, the query has no value (KEDA's ignoreNullValues "false" makes
            # that an error, and the HPA does not scale down on the other triggers meanwhile), never a 0
            for child, _ in exporters:
                child.kill()
            for trigger in summed_triggers():
                await settles(prometheus, trigger["query"], None)
    finally:
        for child, _ in exporters:
            child.kill()
