"""The bridge with ``STREAMCREW_PARTITIONS=4`` (contract §10) on the suite's single Redis, through faust's test path.

Requests land in partition crc32(id) mod 4; the results of every served partition reach the results topic keyed
by job id and are XACKed in their own partition's stream; ``--partitions`` narrows which results a bridge reads.
"""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest

from consumers.kafka_bridge.app import Bridge, build_bridge
from consumers.kafka_bridge.settings import KafkaBridgeSettings
from streams.keys import Keys, partition_of
from streams.records import get_job
from tests.consumers.kafka.results_path import Kafka, add_results, forward_with_runtime, group_state

PARTITIONS = 4
RESULTS = 200


def partitioned_bridge(redis: Any, redis_url: str, prefix: str, serve: str = "") -> Bridge:
    settings = KafkaBridgeSettings(redis_url=redis_url, prefix=prefix, kafka_broker="kafka://127.0.0.1:9", metrics_port=0,
                                   partitions=PARTITIONS, serve_partitions=serve, lease_s=5)
    return build_bridge(settings, redis, consumer=f"test-bridge-{serve or 'all'}")


@pytest.fixture
async def made(redis: Any, redis_url: str, prefix: str) -> AsyncIterator[Callable[[str], Bridge]]:
    built: list[Bridge] = []

    def make(serve: str = "") -> Bridge:
        built.append(partitioned_bridge(redis, redis_url, prefix, serve))
        return built[-1]

    yield make
    for bridge in built:
        shutil.rmtree(bridge.datadir, ignore_errors=True)


@pytest.mark.usefixtures("needs_redis7")  # XINFO GROUPS entries-read and lag
async def test_results_of_every_partition_are_produced_keyed_by_job_id_and_xacked_in_their_own_partition(
    made: Callable[[str], Bridge], redis: Any, keys: Keys,
) -> None:
    # Given results in all four partitions' streams
    ids = [f"job-{n}" for n in range(RESULTS)]
    await add_results(redis, keys, PARTITIONS, ids)
    per_partition = Counter(partition_of(i, PARTITIONS) for i in ids)
    assert sorted(per_partition) == list(range(PARTITIONS)), per_partition
    bridge = made("")
    assert [p.results for p in bridge.partitions] == [keys.in_partition(p).results for p in range(PARTITIONS)]
    kafka = Kafka()

    async def all_acked() -> bool:
        states = [await group_state(redis, keys.in_partition(p).results) for p in range(PARTITIONS)]
        return all(s is not None and s["pending"] == 0 and s["lag"] == 0 for s in states) and len(kafka.sent) == RESULTS

    # When the bridge's runtime reads them into the results agent
    await forward_with_runtime(bridge, kafka, all_acked, f"{RESULTS} results sent and XACKed in 4 partitions")

    # Then each job's result went to the topic (at least) once, keyed by its id, read from and XACKed in its own partition
    assert set(kafka.sent) == {i.encode() for i in ids} and max(kafka.sent.values()) == 1
    for job_id in ids:
        assert kafka.streams[job_id.encode()] == keys.in_partition(partition_of(job_id, PARTITIONS)).results, job_id
    for p in range(PARTITIONS):
        state = await group_state(redis, keys.in_partition(p).results)
        assert state is not None and state["entries-read"] == per_partition[p] and state["pending"] == 0, (p, state)
    assert not await redis.exists(keys.results), "nothing is read from (or created in) the unpartitioned results stream"


@pytest.mark.usefixtures("needs_redis7")
async def test_partitions_narrow_the_results_a_bridge_reads(made: Callable[[str], Bridge], redis: Any, keys: Keys) -> None:
    # Given results in every partition, and a bridge that serves partitions 0-1 only
    ids = [f"job-{n}" for n in range(RESULTS)]
    await add_results(redis, keys, PARTITIONS, ids)
    mine = {i.encode() for i in ids if partition_of(i, PARTITIONS) in (0, 1)}
    bridge = made("0-1")
    assert [p.partition for p in bridge.partitions] == [0, 1]
    kafka = Kafka()

    async def mine_acked() -> bool:
        states = [await group_state(redis, keys.in_partition(p).results) for p in (0, 1)]
        return set(kafka.sent) == mine and all(s is not None and s["pending"] == 0 for s in states)

    # When it runs
    await forward_with_runtime(bridge, kafka, mine_acked, "the results of partitions 0 and 1 sent and XACKed")

    # Then it sent only theirs; partitions 2-3 wait, whole, for the bridge that serves them
    assert set(kafka.sent) == mine
    for p in (2, 3):
        state = await group_state(redis, keys.in_partition(p).results)
        assert state is None or state["entries-read"] in (0, None), (p, state)

    other = made("2-3")
    await forward_with_runtime(other, kafka, lambda: len(kafka.sent) == RESULTS, "the other bridge sends partitions 2 and 3")
    assert set(kafka.sent) == {i.encode() for i in ids} and max(kafka.sent.values()) == 1


def request(**fields: Any) -> bytes:
    return orjson.dumps({"agent": "echo", "data": {"n": 1}, **fields})


async def test_requests_land_in_their_crc32_partition_and_a_redelivery_meets_its_first_copy(
    made: Callable[[str], Bridge], redis: Any, keys: Keys,
) -> None:
    bridge = made("0")  # which results a bridge reads does not narrow where it publishes
    ids = [f"order-{n}" for n in range(40)]
    async with bridge.requests_agent.test_context() as agent:
        for job_id in ids:
            await agent.put(request(), key=job_id.encode())
        await agent.put(request(), key=b"order-0")  # Kafka redelivers a record
        await agent.put(b"{nope", key=b"bad-json")
    outcomes = list(agent.results.values())
    assert [o.published for o in outcomes[:len(ids)]] == [[i] for i in ids]
    assert outcomes[len(ids)].duplicates == ["order-0"] and outcomes[-1].invalid == ["bad-json"]
    for job_id in ids:
        p = partition_of(job_id, PARTITIONS)
        record = await get_job(redis, keys, job_id, partitions=PARTITIONS)
        assert record is not None and record.status == "queued", job_id
        assert await redis.exists(keys.in_partition(p).job(job_id)), (job_id, p)
    lane_lengths = [await redis.xlen(keys.in_partition(p).lane("normal")) for p in range(PARTITIONS)]
    assert lane_lengths == [sum(partition_of(i, PARTITIONS) == p for i in ids) for p in range(PARTITIONS)]
    bad = keys.in_partition(partition_of("bad-json", PARTITIONS))
    (letter,) = [f for _, f in await redis.xrange(bad.dead)]
    assert letter["id"] == "bad-json" and letter["reason"] == "invalid", "a dead letter lives in its job id's partition"


@pytest.mark.usefixtures("needs_redis7")
async def test_a_malformed_result_is_dead_lettered_in_its_own_partition(made: Callable[[str], Bridge], redis: Any, keys: Keys) -> None:
    # Given a malformed entry in partition 2's results stream, beside a good result in the same stream
    good = next(f"job-{n}" for n in range(100) if partition_of(f"job-{n}", PARTITIONS) == 2)
    await redis.xadd(keys.in_partition(2).results, {"id": "broken", "junk": "1"})
    await add_results(redis, keys, PARTITIONS, [good])
    kafka = Kafka()

    async def settled() -> bool:
        state = await group_state(redis, keys.in_partition(2).results)
        return state is not None and state["pending"] == 0 and state["lag"] == 0 and len(kafka.sent) == 1

    await forward_with_runtime(made(""), kafka, settled, "the good result sent and the broken one settled")
    assert set(kafka.sent) == {good.encode()}
    (letter,) = [f for _, f in await redis.xrange(keys.in_partition(2).dead)]
    assert letter["id"] == "broken" and letter["reason"] == "invalid" and letter["source_stream"] == keys.in_partition(2).results
    assert [await redis.xlen(keys.in_partition(p).dead) for p in (0, 1, 3)] == [0, 0, 0]
