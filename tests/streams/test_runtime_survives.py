"""An error no loop expects (a handler's bug, a library's surprise) never stops a runtime's reading or reclaiming."""

from __future__ import annotations

import asyncio
import logging

import pytest
from redis.asyncio import Redis
from redis.exceptions import ClusterError

from streams.outage import CLUSTER_UNREACHABLE
from streams.runtime import Entry, GroupRuntime, Slot
from tests.support import wait_until


class FailingOnce:
    """Raises an unexpected error on the first batch it is given (each loop's first call), then holds what it gets."""

    def __init__(self, runtime: GroupRuntime) -> None:
        self.runtime = runtime
        self.calls = 0
        self.held: list[str] = []
        self.ticks = 0
        runtime.handler = self

    async def on_entries(self, stream: str, entries: list[Entry], *, reclaimed: bool) -> None:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("a bug in the handler")
        self.held += [eid for eid, _ in entries]

    async def hand_back(self, slots: list[Slot]) -> None:
        pass

    async def tick(self) -> None:
        self.ticks += 1
        if self.ticks == 1:
            raise RuntimeError("a bug in upkeep")


async def test_a_handler_error_frees_its_slots_and_the_loops_go_on(redis: Redis, caplog: pytest.LogCaptureFixture) -> None:
    # Given a runtime with a 1 s lease whose handler fails on the first batch and whose upkeep fails once
    stream = "survive:lane"
    await redis.xgroup_create(stream, "g", id="0", mkstream=True)
    runtime = GroupRuntime(redis, streams=[stream], group="g", consumer="me", concurrency=4, lease_s=1, block_ms=100, tick_s=0.05)
    handler = FailingOnce(runtime)
    first = await redis.xadd(stream, {"n": "1"})
    caplog.set_level(logging.ERROR, logger="streams.runtime")
    task = asyncio.create_task(runtime.run())
    try:
        # When more entries come after the failure
        await wait_until(lambda: handler.calls >= 1, timeout=10, what="the first batch")
        later = await redis.xadd(stream, {"n": "2"})
        # Then the read loop reads them, the failed batch's slot is free (not renewed: reclaimed after its lease,
        # by the sweep), and upkeep runs again
        await wait_until(lambda: later in handler.held, timeout=10, what="the entry after the failure to be read")
        await wait_until(lambda: first in handler.held, timeout=15, what="the failed entry to be reclaimed after its lease")
        await wait_until(lambda: handler.ticks >= 2, timeout=10, what="upkeep to run again")
        assert "unexpected error in the read loop" in caplog.text and "a bug in the handler" in caplog.text
        assert "unexpected error in upkeep" in caplog.text
    finally:
        runtime.stop_accepting()
        await asyncio.gather(task, return_exceptions=True)
        await runtime.stop_helpers()


async def test_consumer_cleanup_goes_on_after_a_cluster_wide_outage(redis: Redis) -> None:
    # Given a runtime whose cleanup of idle consumers meets "no node of the cluster answers" once (that error is no
    # RedisError: it ended the cleanup loop for good)
    stream = "survive:forget"
    await redis.xgroup_create(stream, "g", id="0", mkstream=True)
    runtime = GroupRuntime(redis, streams=[stream], group="g", consumer="me", concurrency=1, lease_s=1, block_ms=100, forget_idle_s=10)
    FailingOnce(runtime)
    calls = 0
    real = runtime.leases.forget_idle_consumers

    async def unreachable_once() -> list[str]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise (CLUSTER_UNREACHABLE[0] if CLUSTER_UNREACHABLE else ClusterError)("Redis Cluster cannot be connected")
        return await real()

    runtime.leases.forget_idle_consumers = unreachable_once  # type: ignore[method-assign]
    task = asyncio.create_task(runtime.run())
    try:
        # Then it runs again (every second here)
        await wait_until(lambda: calls >= 2, timeout=10, what="the consumer cleanup to run again after the outage")
    finally:
        runtime.stop_accepting()
        await runtime.stop_helpers()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
