"""The process's ``/metrics`` endpoint (prometheus-client's HTTP server, in a thread)."""

from __future__ import annotations

import logging

from prometheus_client import start_http_server

log = logging.getLogger(__name__)

# A connection to /metrics that sends no request (or half of one) is closed after this. prometheus-client's server
# has no timeout: each connection holds a thread blocked on its socket for good, so a client opening idle connections
# grew a worker's threads (and memory) without end, beside the jobs it runs. A scrape takes milliseconds.
REQUEST_TIMEOUT_S = 10.0


def serve_metrics(port: int, addr: str = "0.0.0.0", *, request_timeout_s: float = REQUEST_TIMEOUT_S) -> bool:
    """Serve /metrics on ``port``; a port in use is logged, not fatal (several processes on one host)."""
    try:
        served = start_http_server(port, addr=addr)
    except OSError as exc:
        log.warning("metrics: cannot listen on port %d (%s); /metrics is off for this process", port, exc)
        return False
    if isinstance(served, tuple):  # (server, thread): socketserver's handlers time their sockets out by this attribute
        server = served[0]
        server.RequestHandlerClass = type("TimedMetricsHandler", (server.RequestHandlerClass,), {"timeout": request_timeout_s})
    log.info("metrics on http://%s:%d/metrics", addr, port)
    return True
