"""The loops beside a :class:`~streams.runtime.GroupRuntime`'s read: lease renewal, the reclaim sweep, the
handler's upkeep and the cleanup of idle consumers.

Each runs until :meth:`HelperLoops.stop`: Redis down backs off, a refusal is logged, and any other error is logged
with its traceback and survived (:func:`survive`), so nothing stops renewing or reclaiming for good.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from redis.exceptions import ResponseError

from streams.groups import is_nogroup
from streams.outage import REDIS_DOWN, REDIS_FAILED, Backoff

if TYPE_CHECKING:
    from streams.runtime import GroupRuntime

log = logging.getLogger("streams.runtime")  # the runtime's lines, as they were before these loops had a module

# After an error no loop expects, the loop goes on after this pause (not in a busy loop).
UNEXPECTED_PAUSE_S = 1.0


async def survive(runtime: GroupRuntime, loop: str) -> None:
    """Called in an ``except`` block for an error no loop expects (a bug, a library's surprise): logged with its
    traceback, then the loop goes on after a pause, so nothing stops reading, renewing or reclaiming for good."""
    log.exception("%s/%s: unexpected error in %s; going on in %.0fs", runtime.group, runtime.consumer, loop, UNEXPECTED_PAUSE_S)
    await asyncio.sleep(UNEXPECTED_PAUSE_S)


class HelperLoops:
    """A runtime's helper loops: started beside its read, stopped after its drain."""

    def __init__(self, runtime: GroupRuntime) -> None:
        self.runtime = runtime
        self.stopped = False
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(loop()) for loop in (self._renew_loop, self._sweep_loop, self._tick_loop, self._forget_loop)]

    async def stop(self) -> None:
        """Stop every loop. The flag ends a loop even where a library turned the cancellation into an error the
        loop rides out (a timeout racing the cancel)."""
        self.stopped = True
        await self.runtime.quiet.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _every(self, every_s: float, what: str, step: Callable[[], Awaitable[object]], *,
                     while_accepting: bool = False, quiet_nogroup: bool = False) -> None:
        """Run ``step`` every ``every_s`` until stopped: Redis down backs off, a refusal is logged, any
        other error is survived."""
        rt = self.runtime
        backoff = Backoff(f"{rt.group}/{rt.consumer} {what}")
        while not self.stopped:
            await asyncio.sleep(every_s)
            if while_accepting and not rt.accepting:
                continue
            try:
                with backoff.trying():
                    await step()
                backoff.ok()
            except REDIS_DOWN as exc:
                await backoff.failed(exc)
            except ResponseError as exc:
                if not (quiet_nogroup and is_nogroup(exc)):
                    log.warning("%s: %s refused: %s", rt.group, what, exc)
            except Exception:
                await survive(rt, what)

    async def _renew_loop(self) -> None:
        """Reset the idle time of every held entry well inside the lease (XCLAIM ... JUSTID); tell the handler of
        entries still at work that another consumer took over."""
        rt = self.runtime

        async def step() -> None:
            lost = await rt.leases.renew()
            if lost and rt.handler is not None:
                await rt.handler.taken_over(lost)
            if rt.leases.renew_failure is not None:  # the other streams were renewed: now back off and say why
                raise rt.leases.renew_failure
        await self._every(max(0.1, rt.lease_s / 4), "lease renewal", step)

    async def _sweep_loop(self) -> None:
        """XAUTOCLAIM entries idle past the lease (their consumer died or hung), then take up our own orphans."""
        rt = self.runtime

        async def step() -> None:
            await rt.leases.sweep()
            await rt.leases.take_up_orphans()
        await self._every(min(max(0.5, rt.lease_s / 2), 10.0), "the reclaim sweep", step, while_accepting=True, quiet_nogroup=True)

    async def _tick_loop(self) -> None:
        assert self.runtime.handler is not None
        await self._every(self.runtime.tick_s, "upkeep", self.runtime.handler.tick)

    async def _forget_loop(self) -> None:
        """Now and then, drop consumers idle past ``forget_idle_s`` with nothing pending."""
        rt = self.runtime
        every_s = min(60.0, max(1.0, rt.forget_idle_s / 10))
        while not self.stopped:
            await asyncio.sleep(every_s)
            try:
                await rt.leases.forget_idle_consumers()
            except REDIS_FAILED as exc:  # a cluster's "no node answers" is no RedisError: it ended the loop
                log.debug("%s: consumer cleanup skipped: %s", rt.group, exc)
            except Exception:
                await survive(rt, "consumer cleanup")
