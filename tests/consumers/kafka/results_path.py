"""The results path of the bridge driven offline: its own group runtime into faust's test agent, Kafka acknowledging at once."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from consumers.kafka_bridge.app import Bridge
from consumers.kafka_bridge.results_out import KAFKA_BRIDGE_GROUP, ResultBatch
from streams.envelope import JobResult, Status
from streams.keys import Keys, keys_for_job
from tests.support import wait_until


class Kafka:
    """The results topic as the bridge sees it: every send acknowledged at once, remembered by key."""

    def __init__(self) -> None:
        self.sent: Counter[bytes] = Counter()
        self.streams: dict[bytes, str] = {}

    async def send(self, key: bytes, value: bytes) -> asyncio.Future[object]:
        self.sent[key] += 1
        assert orjson.loads(value)["id"] == key.decode()
        acked: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        acked.set_result("ack")
        return acked

    def delivering(self, put: Callable[..., Awaitable[Any]]) -> Callable[[ResultBatch], Awaitable[Any]]:
        """The reader's hand-off to the results agent, noting which partition's stream each record came from."""

        async def deliver(batch: ResultBatch) -> Any:
            for record in batch.records:
                self.streams[record.key] = batch.stream
            return await put(batch, wait=False)

        return deliver


async def add_results(redis: Any, keys: Keys, partitions: int, ids: list[str]) -> None:
    """Each result event in the results stream of its job's partition, as workers write them."""
    for job_id in ids:
        result = JobResult(id=job_id, agent="echo", status=Status.COMPLETED, result={"echo": job_id}, attempts=1)
        await redis.xadd(keys_for_job(keys, partitions, job_id).results, result.to_fields())


async def group_state(redis: Any, stream: str) -> dict[str, Any] | None:
    groups = await redis.xinfo_groups(stream)
    return next((g for g in groups if g["name"] == KAFKA_BRIDGE_GROUP), None)


async def forward_with_runtime(bridge: Bridge, kafka: Kafka, until: Callable[[], bool | Awaitable[bool]], what: str) -> None:
    """Run the bridge's group runtime (the real read loop) into the results agent until ``until``, then drain."""
    bridge.results_out.send = kafka.send
    async with bridge.results_agent.test_context() as agent:
        bridge.runtime.handler.deliver = kafka.delivering(agent.put)  # type: ignore[union-attr]
        running = asyncio.create_task(bridge.runtime.run())
        try:
            await wait_until(until, timeout=20, what=what)
        finally:
            finished, handed_back = await bridge.runtime.drain(5)
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
    assert handed_back == 0, f"{handed_back} result entries were still waiting for Kafka at the drain"
