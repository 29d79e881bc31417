"""How the demo ends cleanly: SIGTERM and SIGHUP interrupt it as Ctrl-C does, and its keys leave an outside Redis."""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
from collections.abc import AsyncIterator

from redis.asyncio import Redis

UNLINK_BATCH = 500
INTERRUPTING = (signal.SIGTERM, signal.SIGHUP)  # SIGINT is asyncio's runner's own


@contextlib.asynccontextmanager
async def interrupted_by(*signals: signal.Signals) -> AsyncIterator[None]:
    """Make ``signals`` cancel the current task once and end it in ``KeyboardInterrupt``, as Ctrl-C does.

    A supervisor's SIGTERM or a closed terminal's SIGHUP then runs every ``finally`` (children stopped, the
    embedded Redis stopped, its folder removed) instead of killing the demo outright. A repeated signal is
    ignored: the cleanup it would interrupt is what it asks for.
    """
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    received: list[signal.Signals] = []

    def on_signal(signum: signal.Signals) -> None:
        if not received:
            received.append(signum)
            task.cancel()

    for signum in signals:
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        yield
    except asyncio.CancelledError:
        if received and task.uncancel() == 0:
            raise KeyboardInterrupt from None
        raise
    finally:
        for signum in signals:
            loop.remove_signal_handler(signum)
    if received:  # the run swallowed the cancellation (--serve does): it ended as asked
        task.uncancel()


def glob_escape(text: str) -> str:
    """``text`` as a literal in a ``SCAN MATCH`` pattern."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


async def delete_prefix(redis: Redis, prefix: str) -> int:
    """UNLINK every key ``<prefix>:*`` (found by ``SCAN MATCH``), in batches; returns how many went.

    See https://redis.io/docs/latest/commands/scan/ and https://redis.io/docs/latest/commands/unlink/.
    """
    deleted = 0
    batch: list[str] = []
    async for key in redis.scan_iter(match=f"{glob_escape(prefix)}:*", count=UNLINK_BATCH):
        batch.append(key)
        if len(batch) >= UNLINK_BATCH:
            deleted += int(await redis.unlink(*batch))
            batch = []
    if batch:
        deleted += int(await redis.unlink(*batch))
    return deleted
