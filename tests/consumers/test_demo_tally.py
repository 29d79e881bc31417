"""The demo's live figures read the workers' /metrics. A worker the demo SIGKILLs frees its port, and another process may
take it: what answers there then (an error page, HTML) keeps that worker's last figures; it does not end the demo
(a test run once saw the demo exit with "invalid metric name:<!DOCTYPE HTML>")."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from redis.asyncio import Redis

from consumers.demo.tally import Tally
from streams.keys import Keys

METRICS = b"# TYPE streamcrew_reclaimed_total counter\nstreamcrew_reclaimed_total 3.0\n"
ERROR_PAGE = b"<!DOCTYPE HTML>\n<html><head><title>Error response</title></head><body>404</body></html>\n"


class Page(BaseHTTPRequestHandler):
    """Answers every GET with the page the test sets."""

    status, body = 200, METRICS

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(Page.status)
        self.send_header("Content-Length", str(len(Page.body)))
        self.end_headers()
        self.wfile.write(Page.body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (http.server's name)
        pass


@pytest.fixture
def metrics_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("status", [200, 404])
async def test_a_metrics_port_answered_by_another_process_keeps_the_workers_last_figures(
        redis: Redis, keys: Keys, metrics_url: str, status: int) -> None:
    tally = Tally(redis=redis, keys=keys, metrics_urls=[metrics_url])
    async with httpx.AsyncClient() as http:
        # Given a worker's figures read once
        Page.status, Page.body = 200, METRICS
        await tally.poll(http)
        assert tally.reclaims == 3
        # When its port answers with something that is no metrics page
        Page.status, Page.body = status, ERROR_PAGE
        await tally.poll(http)
        # Then the demo goes on with that worker's last figures
        assert tally.reclaims == 3
