"""A batch that meets a failover (CLUSTERDOWN, TRYAGAIN, READONLY) is written again, not refused."""

from __future__ import annotations

import asyncio
import logging

import pytest
from redis.exceptions import ClusterDownError, ReadOnlyError, ResponseError, TryAgainError

from streams.batch import BatchWriter


@pytest.mark.parametrize("outage", [ClusterDownError("CLUSTERDOWN The cluster is down"), TryAgainError("TRYAGAIN"),
                                    ReadOnlyError("READONLY You can't write against a read only replica.")])
async def test_a_failover_answer_is_retried_until_the_batch_is_written(outage: ResponseError) -> None:
    calls: list[list[str]] = []
    done: dict[str, bool] = {}

    async def write(batch: list[str]) -> list[bool]:
        calls.append(batch)
        if len(calls) == 1:
            raise outage
        return [True] * len(batch)

    writer: BatchWriter[str] = BatchWriter("test", write, lambda item, wrote: done.__setitem__(item, wrote))
    task = asyncio.create_task(writer.run())
    writer.submit("a")
    writer.submit("b")
    await asyncio.wait_for(writer.flush(), timeout=10)
    await asyncio.wait_for(writer.close(task), timeout=10)
    # Then the same batch went again after the outage, and every item is reported written
    assert calls[0] == calls[1] == ["a", "b"]
    assert done == {"a": True, "b": True}


async def test_a_script_error_is_still_a_refusal() -> None:
    done: dict[str, bool] = {}

    async def write(batch: list[str]) -> list[bool]:
        raise ResponseError("ERR Error running script")

    writer: BatchWriter[str] = BatchWriter("test", write, lambda item, wrote: done.__setitem__(item, wrote))
    task = asyncio.create_task(writer.run())
    writer.submit("a")
    await asyncio.wait_for(writer.flush(), timeout=10)
    await asyncio.wait_for(writer.close(task), timeout=10)
    assert done == {"a": False}


async def test_a_group_gone_with_its_redis_is_a_warning_without_a_traceback(redis, keys, caplog) -> None:  # type: ignore[no-untyped-def]
    done: dict[str, bool] = {}

    async def write(batch: list[str]) -> list[bool]:  # a real NOGROUP: the group of a Redis restarted empty
        await redis.xreadgroup("workers", "c", {keys.lane("normal"): ">"}, count=1)
        return [True] * len(batch)

    writer: BatchWriter[str] = BatchWriter("test", write, lambda item, wrote: done.__setitem__(item, wrote))
    task = asyncio.create_task(writer.run())
    with caplog.at_level(logging.WARNING, logger="streams.batch"):
        writer.submit("a")
        await asyncio.wait_for(writer.flush(), timeout=10)
        await asyncio.wait_for(writer.close(task), timeout=10)
    # Then the batch counts as not written, said in one line (the read loop makes the group again)
    assert done == {"a": False}
    said = [r for r in caplog.records if r.name == "streams.batch"]
    assert [r.levelno for r in said] == [logging.WARNING] and "consumer group is gone" in said[0].getMessage()
    assert said[0].exc_info is None
