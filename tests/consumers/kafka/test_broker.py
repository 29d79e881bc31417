"""The bridge against a real Kafka-protocol broker: 1,000 requests in, 1,000 results out, each job once across a restart."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import orjson
import pytest

from consumers.kafka_bridge.results_out import KAFKA_BRIDGE_GROUP
from consumers.processes import Child, streamcrew_cmd
from streams.keys import Keys, partition_keys, partition_of
from tests.consumers.kafka.kafka_client import TopicReader, committed, create_topics, produce
from tests.support import wait_for_log, wait_until

pytestmark = pytest.mark.slow

JOBS = 1000
INVALID = [(b"bad-json", b"{nope"), (b"bad-agent", b'{"data": {}}'), (b"bad-lane", b'{"agent": "echo", "data": {}, "lane": "urgent"}'),
           (b"bad-list", b"[1]"), (b"tombstone", None)]


class Bridges:
    def __init__(self, bootstrap: str, redis_url: str, prefix: str, log_dir: Path) -> None:
        self.partitions = 1
        self.args = ["kafka-bridge", "--broker", f"kafka://{bootstrap}", "--requests-topic", f"{prefix}-requests",
                     "--results-topic", f"{prefix}-results", "--group-id", f"{prefix}-bridge", "--topic-partitions", "4"]
        # A short session and lease: a killed bridge's partitions and held results move on within seconds.
        self.env = {"STREAMCREW_REDIS_URL": redis_url, "STREAMCREW_PREFIX": prefix, "STREAMCREW_METRICS_PORT": "0",
                    "STREAMCREW_KAFKA_SESSION_TIMEOUT_S": "6", "STREAMCREW_LEASE_S": "3"}
        self.log_dir = log_dir
        self.children: list[Child] = []

    def start(self) -> Child:
        env = {**self.env, "STREAMCREW_PARTITIONS": str(self.partitions)}
        child = Child(streamcrew_cmd(*self.args), env=env, log_path=self.log_dir / f"bridge-{len(self.children)}.log")
        self.children.append(child)
        wait_for_log(child, " ready: ", timeout=90)
        return child

    def close(self) -> None:
        for child in self.children:
            if child.alive():
                child.kill()


@pytest.fixture
def bridges(kafka_bootstrap: str, redis_url: str, prefix: str, tmp_path: Path) -> Any:
    made = Bridges(kafka_bootstrap, redis_url, prefix, tmp_path)
    yield made
    made.close()


# The killed bridge runs on STREAMCREW_PARTITIONS=4 (contract §10): requests by crc32(id), results read from all four.
@pytest.mark.parametrize(("restart", "partitions"), [(signal.SIGTERM, 1), (signal.SIGKILL, 4)], ids=["graceful", "killed-partitioned"])
async def test_a_thousand_requests_through_the_broker_each_job_once_across_a_bridge_restart(
    kafka_bootstrap: str, bridges: Bridges, workers: Any, redis: Any, keys: Keys, prefix: str, restart: signal.Signals, partitions: int,
    needs_redis7: None,
) -> None:
    bridges.partitions = partitions
    every = partition_keys(keys, partitions)
    requests_topic, results_topic, group = f"{prefix}-requests", f"{prefix}-results", f"{prefix}-bridge"
    await create_topics(kafka_bootstrap, requests_topic, results_topic, partitions=4)
    records: list[tuple[bytes | None, bytes | None]] = [
        (f"job-{n}".encode(), orjson.dumps({"agent": "echo", "data": {"n": n}, "priority": n % 11})) for n in range(JOBS)
    ]
    for i, bad in enumerate(INVALID):
        records.insert(150 * (i + 1), bad)
    ends = await produce(kafka_bootstrap, requests_topic, records)

    worker = workers.start("--concurrency", "200", wait_ready=False, env={"STREAMCREW_PARTITIONS": str(partitions)})
    first = bridges.start()
    wait_for_log(worker, " ready: ", timeout=120)  # CrewAI's import is slow on a loaded machine

    async def some_results() -> bool:
        return sum([int(await redis.xlen(k.results)) for k in every]) >= JOBS // 4

    await wait_until(some_results, timeout=90, what=f"{JOBS // 4} results on the streams side before the restart")
    if restart == signal.SIGTERM:
        first.terminate()
        assert first.wait(30) == 0, first.log_text()[-3000:]
    else:
        first.kill()
    bridges.start()

    async with TopicReader(kafka_bootstrap, results_topic) as reader:
        await reader.read_until(JOBS, timeout=180)
        await reader.drain()
    assert set(reader.seen) == {f"job-{n}".encode() for n in range(JOBS)}
    if restart == signal.SIGTERM:
        assert max(reader.seen.values()) == 1, "a graceful restart sends no result twice"
    for key, value in reader.values.items():
        event = orjson.loads(value)
        assert event["id"] == key.decode() and event["status"] == "completed" and event["result"] == {"echo": {"n": int(key[4:])}}

    # The streams side: each job published, run and ended once, whatever Kafka redelivered.
    results = [f for k in every for _, f in await redis.xrange(k.results)]
    assert len(results) == JOBS and len({f["id"] for f in results}) == JOBS
    assert {f["attempts"] for f in results} == {"1"}
    for k in every:
        assert all(partition_of(f["id"], partitions) == (k.partition or 0) for _, f in await redis.xrange(k.results))

    async def all_xacked() -> bool:  # in each partition's own stream (a killed bridge's entries after their reclaim)
        groups = [g for k in every for g in await redis.xinfo_groups(k.results) if g["name"] == KAFKA_BRIDGE_GROUP]
        return len(groups) == len(every) and all(g["pending"] == 0 and g["lag"] == 0 for g in groups)

    await wait_until(all_xacked, timeout=30, what="the kafka-bridge group to XACK every result in its partition", every=0.5)
    letters = [f for k in every for _, f in await redis.xrange(k.dead)]
    assert {f["reason"] for f in letters} == {"invalid"} and len({f["source_id"] for f in letters}) == len(INVALID)

    async def all_committed() -> bool:
        return await committed(kafka_bootstrap, group, requests_topic, ends) == ends

    await wait_until(all_committed, timeout=30, what="the bridge's group to commit every requests-topic offset, invalid records included", every=0.5)
