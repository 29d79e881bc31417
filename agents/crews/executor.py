"""The thread pool CrewAI's sync steps run in, sized to the worker's concurrency.

CrewAI's native async kickoff still runs each agent step (a sync flow method,
which blocks on the LLM call) via ``asyncio.to_thread``, i.e. in the event
loop's default executor. Python sizes that pool at ``min(32, cpus + 4)`` —
six threads on a two-core box — which would cap a worker at six crews in
flight. ``configure_executor`` sets the size; the pool is installed on the
running loop the first time a crew runs there.
"""

from __future__ import annotations

import asyncio
import weakref
from concurrent.futures import ThreadPoolExecutor

DEFAULT_MAX_WORKERS = 64

_max_workers = DEFAULT_MAX_WORKERS
_installed: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ThreadPoolExecutor] = weakref.WeakKeyDictionary()


def configure_executor(max_workers: int) -> None:
    """Size the crew thread pool (call with the worker's concurrency); applies to the running loop at once."""
    global _max_workers
    if max_workers < 1:
        raise ValueError("max_workers must be >= 1")
    _max_workers = max_workers
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    _install(loop)


def ensure_executor() -> None:
    """Install the sized pool on the running loop if it is not there yet."""
    loop = asyncio.get_running_loop()
    pool = _installed.get(loop)
    if pool is None or pool._max_workers != _max_workers:
        _install(loop)


def _install(loop: asyncio.AbstractEventLoop) -> None:
    pool = ThreadPoolExecutor(max_workers=_max_workers, thread_name_prefix="streamcrew-crew")
    loop.set_default_executor(pool)
    old = _installed.get(loop)
    _installed[loop] = pool
    if old is not None:
        old.shutdown(wait=False)
