"""A Kafka user's side of the bridge tests, through aiokafka (faust's own client): topics, produce, read, offsets."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic


async def create_topics(bootstrap: str, *names: str, partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1) for name in names])
    finally:
        await admin.close()


async def produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None]]) -> dict[int, int]:
    """Send every record; returns partition -> end offset (last offset + 1), from the broker's acknowledgements."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        futures = [await producer.send(topic, key=key, value=value) for key, value in records]
        ends: dict[int, int] = {}
        for meta in await asyncio.gather(*futures):
            ends[meta.partition] = max(ends.get(meta.partition, 0), meta.offset + 1)
        return ends
    finally:
        await producer.stop()


class TopicReader:
    """Reads a whole topic from the start (no group); counts records per key."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False)
        self.seen: Counter[bytes] = Counter()
        self.values: dict[bytes, bytes] = {}

    async def __aenter__(self) -> TopicReader:
        await self.consumer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.consumer.stop()

    async def read_until(self, distinct: int, *, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(self.seen) < distinct:
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s with {len(self.seen)} of {distinct} distinct keys on the results topic")
            batch = await self.consumer.getmany(timeout_ms=500)
            for records in batch.values():
                for record in records:
                    assert record.key is not None, "every result record is keyed by its job id"
                    self.seen[record.key] += 1
                    self.values[record.key] = record.value or b""

    async def drain(self, quiet_s: float = 1.0) -> None:
        """Read whatever else arrives until the topic stays quiet for ``quiet_s`` (late duplicates)."""
        while True:
            batch = await self.consumer.getmany(timeout_ms=int(quiet_s * 1000))
            if not batch:
                return
            for records in batch.values():
                for record in records:
                    self.seen[record.key or b""] += 1


async def committed(bootstrap: str, group: str, topic: str, partitions: dict[int, int]) -> dict[int, int]:
    """The offsets ``group`` committed on ``topic``'s ``partitions`` (0 where none)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        return {p: (await consumer.committed(TopicPartition(topic, p))) or 0 for p in partitions}
    finally:
        await consumer.stop()
