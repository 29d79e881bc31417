"""A webhook receiver on loopback (127.0.0.1 unless told) for the tests: records every POST, answers from a per-path script."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float


@dataclass
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b"ok"


class Receiver:
    """``script(path, [Reply...])`` answers the first requests on a path in order, then 200;
    ``hold(path)`` makes requests on a path wait until ``release(path)``."""

    def __init__(self, port: int = 0, *, host: str = "127.0.0.1", delay_s: float = 0.0) -> None:
        self.requests: list[Received] = []
        self._lock = threading.Lock()
        self._scripts: dict[str, list[Reply]] = {}
        self._gates: dict[str, threading.Event] = {}
        self.delay_s = delay_s
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                reply = receiver._record(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                self.send_response(reply.status)
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                self.send_header("content-length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet
                pass

        self.host = host
        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _record(self, path: str, headers: dict[str, str], body: bytes) -> Reply:
        with self._lock:
            self.requests.append(Received(path, headers, body, time.monotonic()))
            script = self._scripts.get(path)
            reply = script.pop(0) if script else Reply()
            gate = self._gates.get(path)
        if gate is not None:
            gate.wait(25)
        if self.delay_s:
            time.sleep(self.delay_s)
        return reply

    def start(self) -> Receiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        for gate in self._gates.values():
            gate.set()
        self.server.shutdown()
        self.server.server_close()

    def url(self, path: str = "/hook") -> str:
        return f"http://{self.host}:{self.port}{path}"

    def script(self, path: str, replies: list[Reply]) -> None:
        with self._lock:
            self._scripts[path] = list(replies)

    def hold(self, path: str) -> None:
        self._gates[path] = threading.Event()

    def release(self, path: str) -> None:
        self._gates[path].set()

    def on(self, path: str) -> list[Received]:
        with self._lock:
            return [r for r in self.requests if r.path == path]

    def count(self, path: str | None = None) -> int:
        with self._lock:
            return sum(1 for r in self.requests if path is None or r.path == path)
