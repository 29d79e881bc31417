"""Another process's HTTP server on a loopback port: what a test may meet on a port it drew (tests run in parallel)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SQUATTER_BODY = b"squatter"


class _AnswersEverything(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(200)
        self.send_header("Content-Length", str(len(SQUATTER_BODY)))
        self.end_headers()
        self.wfile.write(SQUATTER_BODY)

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def squatting() -> Iterator[int]:
    """A server answering 200 to any GET on a loopback port, for the block; yields the port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _AnswersEverything)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
