"""uvicorn for streamcrew's HTTP processes (the gateway, mock-llm): a graceful signal ends the process with 0."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

import uvicorn


class Server(uvicorn.Server):
    """uvicorn, without raising the signal it caught again once it has shut down gracefully (it does, so the
    process ends killed by it: 143 for SIGTERM, 130 for SIGINT); exit 0, as the worker and notifier do."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
