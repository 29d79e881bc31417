"""The process's ``/metrics`` endpoint (prometheus-client's HTTP server, in a thread)."""

from __future__ import annotations

import logging

from prometheus_client import start_http_server

log = logging.getLogger(__name__)


def serve_metrics(port: int, addr: str = "0.0.0.0") -> bool:
    """Serve /metrics on ``port``; a port in use is logged, not fatal (several processes on one host)."""
    try:
        start_http_server(port, addr=addr)
    except OSError as exc:
        log.warning("metrics: cannot listen on port %d (%s); /metrics is off for this process", port, exc)
        return False
    log.info("metrics on http://%s:%d/metrics", addr, port)
    return True
