"""Running the gateway under uvicorn (``streamcrew gateway``)."""

from __future__ import annotations

import logging

import uvicorn

from consumers.gateway.app import create_app
from consumers.gateway.protocol import bounded_protocol
from consumers.gateway.settings import GatewaySettings
from consumers.lifecycle import settle_heap
from consumers.serving import Server

# Open event streams would hold a graceful shutdown forever; they resume with Last-Event-ID anyway.
GRACEFUL_SHUTDOWN_S = 5


class QueryHidden(logging.Filter):
    """uvicorn's access line shows a request's path with its query: a client that puts a key or a token there
    (``?api_key=``, an EventSource's workaround for headers) would leave it in the log. The line keeps the path."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args  # uvicorn: (client, method, path with query, HTTP version, status)
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str) and "?" in args[2]:
            record.args = (*args[:2], args[2].partition("?")[0] + "?[query]", *args[3:])
        return True


def run_gateway(settings: GatewaySettings) -> None:
    """Serve the HTTP API until SIGINT or SIGTERM; blocks."""
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("uvicorn.access").addFilter(QueryHidden())
    config = uvicorn.Config(
        create_app(settings), host=settings.host, port=settings.port, loop="auto", http=bounded_protocol(settings.head_timeout_s), lifespan="on",
        access_log=settings.access_log, log_level=settings.log_level, server_header=False,
        # No WebSocket route: no WebSocket stack either, when an environment has one (uvicorn[standard]'s websockets
        # would take upgrades, and log each path with its query on uvicorn.error, past QueryHidden)
        ws="none",
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S, log_config=None, timeout_keep_alive=settings.keep_alive_s,
        # The client address keys the per-client rate limit: X-Forwarded-For counts only from a configured proxy
        # (uvicorn's default trusts it from 127.0.0.1, so anyone on the host could pick their own bucket).
        proxy_headers=bool(settings.trusted_proxies), forwarded_allow_ips=settings.trusted_proxies or None,
    )
    # As the worker and notifier do: a reader's large result (300,000 small lists) spent most of its parse in the
    # collector's passes, every tenant's requests waiting (369 - 433 ms of the loop; 60 - 84 ms after this)
    settle_heap()
    Server(config).run()
