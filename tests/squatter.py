"""Another process's HTTP server on a loopback port: what a test may meet on a port it drew (tests run in parallel)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SQUATTER_BODY = b"squatter"


@dataclass
class Page:
    """What the server answers to every GET; a test may change it while the server runs."""

    status: int = 200
    body: bytes = SQUATTER_BODY


class _AnswersEverything(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        page: Page = self.server.page  # type: ignore[attr-defined]
        self.send_response(page.status)
        self.send_header("Content-Length", str(len(page.body)))
        self.end_headers()
        self.wfile.write(page.body)

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def squatting(page: Page | None = None) -> Iterator[int]:
    """A server answering ``page`` (200 "squatter" by default) to any GET on a loopback port, for the block; yields the port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _AnswersEverything)
    server.page = page or Page()  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
