"""Running the gateway under uvicorn (``streamcrew gateway``)."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator

import uvicorn

from consumers.gateway.app import create_app
from consumers.gateway.settings import GatewaySettings

# Open event streams would hold a graceful shutdown forever; they resume with Last-Event-ID anyway.
GRACEFUL_SHUTDOWN_S = 5


class Server(uvicorn.Server):
    """uvicorn, without raising the signal it caught again once it has shut down gracefully (it does, so the
    process ends killed by it: 143 for SIGTERM, 130 for SIGINT); the gateway exits 0, as the worker and notifier do."""

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


def run_gateway(settings: GatewaySettings) -> None:
    """Serve the HTTP API until SIGINT or SIGTERM; blocks."""
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    config = uvicorn.Config(
        create_app(settings), host=settings.host, port=settings.port, loop="auto", http="auto", lifespan="on",
        access_log=settings.access_log, log_level=settings.log_level, server_header=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S, log_config=None,
        # The client address keys the per-client rate limit: X-Forwarded-For counts only from a configured proxy
        # (uvicorn's default trusts it from 127.0.0.1, so anyone on the host could pick their own bucket).
        proxy_headers=bool(settings.trusted_proxies), forwarded_allow_ips=settings.trusted_proxies or None,
    )
    Server(config).run()
