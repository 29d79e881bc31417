"""A batch that meets a failover (CLUSTERDOWN, TRYAGAIN, READONLY) is written again, not refused."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import pytest
from redis.exceptions import ClusterDownError, ReadOnlyError, ResponseError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError

from streams.batch import BatchWriter, PartlyWritten
from streams.keys import Keys, partition_keys
from streams.settle import SettleOp, Settler, done_op


def started(write: Callable[[list[str]], Awaitable[list[bool]]]) -> tuple[BatchWriter[str], asyncio.Task[None], dict[str, bool]]:
    """A running BatchWriter of ``write`` and what it reported per item."""
    done: dict[str, bool] = {}
    writer: BatchWriter[str] = BatchWriter("test", write, lambda item, wrote: done.__setitem__(item, wrote))
    return writer, asyncio.create_task(writer.run()), done


async def settle_one_per_partition(redis, keys, write_partition) -> tuple[list[Keys], list[tuple[str, bool]]]:  # type: ignore[no-untyped-def]
    """Settle one done op in each of two partitions (partition 1's first in the batch) through ``write_partition``
    (given the real one and the partition); returns the partitions and the releases in order."""
    parts = partition_keys(keys, 2)
    released: list[tuple[str, bool]] = []
    settler = Settler(redis, parts, group="workers", max_result_bytes=1_048_576, job_ttl_s=60,
                      release=lambda stream, entry_id, settled=True: released.append((stream, settled)))
    real = settler._write_partition

    async def write(p: int, batch: list[SettleOp]) -> list[bool]:
        return await write_partition(real, p, batch)

    settler._write_partition = write  # type: ignore[method-assign]
    task = asyncio.create_task(settler.run())
    for k in reversed(parts):
        settler.submit(done_op(k.lane("normal"), "1-0", f"{k.lane('normal')}/1-0", f"job-{k.partition}",
                               {"id": f"job-{k.partition}", "status": "completed"}, None))
    await asyncio.wait_for(settler.flush(), timeout=10)
    await asyncio.wait_for(settler.close(task), timeout=10)
    return parts, released


@pytest.mark.parametrize("outage", [ClusterDownError("CLUSTERDOWN The cluster is down"), TryAgainError("TRYAGAIN"),
                                    ReadOnlyError("READONLY You can't write against a read only replica.")])
async def test_a_failover_answer_is_retried_until_the_batch_is_written(outage: ResponseError) -> None:
    calls: list[list[str]] = []

    async def write(batch: list[str]) -> list[bool]:
        calls.append(batch)
        if len(calls) == 1:
            raise outage
        return [True] * len(batch)

    writer, task, done = started(write)
    writer.submit("a")
    writer.submit("b")
    await asyncio.wait_for(writer.flush(), timeout=10)
    await asyncio.wait_for(writer.close(task), timeout=10)
    # Then the same batch went again after the outage, and every item is reported written
    assert calls[0] == calls[1] == ["a", "b"]
    assert done == {"a": True, "b": True}


async def test_a_script_error_is_still_a_refusal() -> None:
    async def write(batch: list[str]) -> list[bool]:
        raise ResponseError("ERR Error running script")

    writer, task, done = started(write)
    writer.submit("a")
    await asyncio.wait_for(writer.flush(), timeout=10)
    await asyncio.wait_for(writer.close(task), timeout=10)
    assert done == {"a": False}


async def test_a_group_gone_with_its_redis_is_a_warning_without_a_traceback(redis, keys, caplog) -> None:  # type: ignore[no-untyped-def]
    async def write(batch: list[str]) -> list[bool]:  # a real NOGROUP: the group of a Redis restarted empty
        await redis.xreadgroup("workers", "c", {keys.lane("normal"): ">"}, count=1)
        return [True] * len(batch)

    writer, task, done = started(write)
    with caplog.at_level(logging.WARNING, logger="streams.batch"):
        writer.submit("a")
        await asyncio.wait_for(writer.flush(), timeout=10)
        await asyncio.wait_for(writer.close(task), timeout=10)
    # Then the batch counts as not written, said in one line (the read loop makes the group again)
    assert done == {"a": False}
    said = [r for r in caplog.records if r.name == "streams.batch"]
    assert [r.levelno for r in said] == [logging.WARNING] and "consumer group is gone" in said[0].getMessage()
    assert said[0].exc_info is None


async def test_an_unexpected_error_is_reported_as_not_written_and_the_writer_goes_on(caplog) -> None:  # type: ignore[no-untyped-def]
    async def write(batch: list[str]) -> list[bool]:  # a bug, or a library's surprise
        if "a" in batch:
            raise KeyError("surprise")
        return [True] * len(batch)

    writer, task, done = started(write)
    with caplog.at_level(logging.ERROR, logger="streams.batch"):
        writer.submit("a")
        await asyncio.wait_for(writer.flush(), timeout=10)
        writer.submit("b")
        await asyncio.wait_for(writer.flush(), timeout=10)  # before: the writer had died, and this waited for ever
    await asyncio.wait_for(writer.close(task), timeout=10)
    assert done == {"a": False, "b": True}
    assert "a batch of 1 failed" in caplog.text


async def test_a_batch_written_in_part_reports_that_part_and_writes_only_the_rest_again() -> None:
    calls: list[list[str]] = []
    done: list[tuple[str, bool]] = []

    async def write(batch: list[str]) -> list[bool]:
        calls.append(batch)
        if len(calls) == 1:  # "b"'s partition met an outage; "a" and "c" were written (and "c" only acked)
            raise PartlyWritten([True, None, False], ConnectionError("gone"))
        return [True] * len(batch)

    writer: BatchWriter[str] = BatchWriter("test", write, lambda item, wrote: done.append((item, wrote)))
    task = asyncio.create_task(writer.run())
    for item in "abc":
        writer.submit(item)
    await asyncio.wait_for(writer.flush(), timeout=10)
    await asyncio.wait_for(writer.close(task), timeout=10)
    assert calls == [["a", "b", "c"], ["b"]]
    assert done == [("a", True), ("c", False), ("b", True)]


async def test_settle_ops_of_a_partition_whose_master_is_away_wait_while_the_others_are_written(redis, keys) -> None:  # type: ignore[no-untyped-def]
    # Given partition 1's calls meeting an outage (its master away) until partition 0's result is written (before: the
    # whole batch went again, so partition 0 waited for partition 1's master)
    async def away_until_partition_0_is_written(real, p: int, batch: list[SettleOp]) -> list[bool]:  # type: ignore[no-untyped-def]
        if p == 1 and not await redis.xlen(partition_keys(keys, 2)[0].results):
            raise RedisConnectionError("partition 1's master is away")
        return await real(p, batch)

    parts, released = await settle_one_per_partition(redis, keys, away_until_partition_0_is_written)
    # Then partition 0's result was written during the outage, partition 1's after it, each once
    assert released == [(parts[0].lane("normal"), True), (parts[1].lane("normal"), True)]
    assert [int(await redis.xlen(k.results)) for k in parts] == [1, 1]


async def test_a_refusal_in_one_partition_leaves_the_others_written(redis, keys, caplog) -> None:  # type: ignore[no-untyped-def]
    async def refused_in_1(real, p: int, batch: list[SettleOp]) -> list[bool]:  # type: ignore[no-untyped-def]
        if p == 1:
            raise ResponseError("ERR a script bug")
        return await real(p, batch)

    with caplog.at_level(logging.ERROR, logger="streams.batch"):
        parts, released = await settle_one_per_partition(redis, keys, refused_in_1)
    # Then partition 0's op is written, partition 1's reported not written (left to its lease), and said so
    assert sorted(released) == sorted([(parts[0].lane("normal"), True), (parts[1].lane("normal"), False)])
    assert [int(await redis.xlen(k.results)) for k in parts] == [1, 0]
    assert "settle (partition 1): Redis refused a batch of 1" in caplog.text
