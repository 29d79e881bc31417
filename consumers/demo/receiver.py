"""A webhook receiver on loopback that verifies every delivery with the Standard Webhooks library."""

from __future__ import annotations

import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks import Webhook


class Receiver:
    """Counts verified deliveries per webhook-id; a bad signature is counted apart, never trusted."""

    def __init__(self, secret: str) -> None:
        self.verifier = Webhook(secret)
        self.delivered: Counter[str] = Counter()
        self.bad_signatures = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                try:
                    receiver.verifier.verify(body, dict(self.headers.items()))
                    job_id = json.loads(body)["id"]
                    with receiver._lock:
                        receiver.delivered[job_id] += 1
                    self.send_response(204)
                except Exception:  # noqa: BLE001 - any verification failure is a 401
                    with receiver._lock:
                        receiver.bad_signatures += 1
                    self.send_response(401)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/orders"
        self._thread = threading.Thread(target=self.server.serve_forever, name="webhook-receiver", daemon=True)

    def start(self) -> Receiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def count(self) -> tuple[int, int]:
        """(distinct jobs delivered, deliveries in all)."""
        with self._lock:
            return len(self.delivered), sum(self.delivered.values())
