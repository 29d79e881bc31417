"""``streamcrew mock-llm``: a local OpenAI- and Anthropic-compatible endpoint.

A bare ASGI app on uvicorn (uvloop + httptools, no framework, no access log),
so one process holds 10,000 concurrent slow requests. Answers come from
``agents.llm.mock_logic``; faults are injected from a seeded RNG so a run is
reproducible: ``rate_limit`` (fraction answered 429 + Retry-After),
``error_rate`` (fraction answered 500/503), ``key_rps`` (token bucket per API
key, 429 + Retry-After when empty).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import random
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from agents.llm import mock_logic

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

DEFAULT_PORT = 8100
_JSON = [(b"content-type", b"application/json")]


@dataclass(frozen=True, slots=True)
class MockOptions:
    """Behaviour of one mock-llm server; every field is a CLI option."""

    latency_s: float = 0.0
    jitter_s: float = 0.0
    rate_limit: float = 0.0
    error_rate: float = 0.0
    key_rps: float | None = None
    retry_after_s: float = 1.0
    seed: int = 0


@dataclass(frozen=True, slots=True)
class Served:
    """One request as the server saw it; ``key`` is a fingerprint, never the key."""

    at: float
    path: str
    key: str
    status: int


@dataclass
class _Bucket:
    tokens: float
    at: float


@dataclass
class MockLLMApp:
    """The ASGI app; ``served`` records every request for tests (fingerprints only)."""

    options: MockOptions
    served: list[Served] = field(default_factory=list)
    record: bool = True
    _rng: random.Random = field(init=False)
    _buckets: dict[str, _Bucket] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.options.seed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        if path == "/healthz" and method == "GET":
            await _respond(send, 200, b'{"status":"ok"}')
            return
        if method != "POST" or path not in ("/v1/chat/completions", "/v1/messages"):
            await _respond(send, 404, b'{"error":{"message":"not found","type":"not_found"}}')
            return
        body = await _read_body(receive)
        key = _key_of(scope["headers"])
        status, payload, headers = self._fault(key)
        if status == 200:
            try:
                request = orjson.loads(body)
                if not isinstance(request, dict):
                    raise ValueError("request body must be a JSON object")
            except ValueError as exc:
                status, payload = 400, orjson.dumps({"error": {"message": f"invalid JSON: {exc}", "type": "invalid_request_error"}})
            else:
                delay = self.options.latency_s + (self._rng.uniform(0, self.options.jitter_s) if self.options.jitter_s else 0.0)
                if delay > 0:
                    await asyncio.sleep(delay)
                try:
                    answer = mock_logic.openai_response(request) if path == "/v1/chat/completions" else mock_logic.anthropic_response(request)
                except (AttributeError, TypeError, ValueError) as exc:  # the wrong shape: a provider's 400, not a crash (a 500 is retried)
                    status, payload = 400, _error("invalid_request_error", f"malformed request: {type(exc).__name__}")
                else:
                    payload = orjson.dumps(answer)
        if self.record:
            self.served.append(Served(time.monotonic(), path, key, status))
        await _respond(send, status, payload, headers)

    def _fault(self, key: str) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        opts = self.options
        if opts.key_rps:
            wait_s = self._take(key, opts.key_rps)
            if wait_s > 0:
                return 429, _error("rate_limit_error", "per-key request rate exceeded"), _retry_after(math.ceil(wait_s))
        if opts.rate_limit and self._rng.random() < opts.rate_limit:
            return 429, _error("rate_limit_error", "rate limit injected by mock-llm"), _retry_after(opts.retry_after_s)
        if opts.error_rate and self._rng.random() < opts.error_rate:
            status = self._rng.choice((500, 503))
            return status, _error("server_error", f"error {status} injected by mock-llm"), []
        return 200, b"", []

    def _take(self, key: str, rps: float) -> float:
        """Token bucket per key: capacity max(1, rps); returns seconds until a token, 0 when taken."""
        now, capacity = time.monotonic(), max(1.0, rps)
        bucket = self._buckets.setdefault(key, _Bucket(capacity, now))
        bucket.tokens = min(capacity, bucket.tokens + (now - bucket.at) * rps)
        bucket.at = now
        if bucket.tokens >= 1:
            bucket.tokens -= 1
            return 0.0
        return (1 - bucket.tokens) / rps


def _error(kind: str, message: str) -> bytes:
    return orjson.dumps({"type": "error", "error": {"type": kind, "message": message}})


def _retry_after(seconds: float) -> list[tuple[bytes, bytes]]:
    text = str(int(seconds)) if float(seconds).is_integer() else f"{seconds:g}"
    return [(b"retry-after", text.encode())]


def _key_of(headers: list[tuple[bytes, bytes]]) -> str:
    for name, value in headers:
        if name in (b"authorization", b"x-api-key"):
            secret = value.removeprefix(b"Bearer ").strip()
            return "key-" + hashlib.sha256(secret).hexdigest()[:8]
    return "anonymous"


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def _respond(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    length = [(b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": _JSON + length + (headers or [])})
    await send({"type": "http.response.body", "body": body})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def build_app(options: MockOptions | None = None, *, record: bool = True) -> MockLLMApp:
    """The mock-llm ASGI app; ``record=False`` keeps no per-request log (long benchmarks)."""
    return MockLLMApp(options or MockOptions(), record=record)


def _config(app: MockLLMApp, **kwargs: Any) -> Any:
    import uvicorn

    return uvicorn.Config(
        app,
        loop="uvloop",
        http="httptools",
        lifespan="off",
        access_log=False,
        log_level="warning",
        backlog=16384,
        # above the LLM client's own 30 s (agents/llm/client.py): the client drops an idle connection first, so it never
        # sends a request on one the server is closing at that moment
        timeout_keep_alive=75,
        **kwargs,
    )


def serve(
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    *,
    latency_s: float = 0.0,
    jitter_s: float = 0.0,
    rate_limit: float = 0.0,
    error_rate: float = 0.0,
    key_rps: float | None = None,
    retry_after_s: float = 1.0,
    seed: int = 0,
    fd: int | None = None,
) -> None:
    """Run mock-llm until SIGINT or SIGTERM (blocking; exits 0 after either); ``fd`` serves an already-bound socket."""
    from consumers.serving import Server

    options = MockOptions(latency_s, jitter_s, rate_limit, error_rate, key_rps, retry_after_s, seed)
    sock = socket.socket(fileno=fd) if fd is not None else _listening_socket(host, port)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    print(f"mock-llm on http://{shown}:{bound_port}/v1: point the workers at it with "
          f"STREAMCREW_LLM_BASE_URL=http://{shown}:{bound_port}/v1", file=sys.stderr, flush=True)
    Server(_config(build_app(options, record=False))).run(sockets=[sock])


def _listening_socket(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """Bound and listening before the server starts, so clients may connect at once.

    TCP_NODELAY is set here because accepted sockets inherit it on Linux and
    uvicorn writes the head and the body of a response separately: without
    it, Nagle plus the client's delayed ACK adds ~40 ms to keep-alive requests.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.listen(16384)
    return sock


@dataclass(frozen=True, slots=True)
class RunningMock:
    url: str
    app: MockLLMApp | None  # None when it runs in a subprocess

    @property
    def openai_base_url(self) -> str:
        return self.url + "/v1"


@contextlib.asynccontextmanager
async def running_mock_llm(options: MockOptions | None = None, *, subprocess_: bool = False) -> AsyncIterator[RunningMock]:
    """Run mock-llm on a free 127.0.0.1 port, in a thread (default) or a subprocess.

    The socket listens before this yields, so no readiness polling is needed.
    A subprocess keeps the server off the caller's GIL (benchmarks).
    """
    options = options or MockOptions()
    sock = _listening_socket()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        if subprocess_:
            async with _in_subprocess(sock, options):
                yield RunningMock(url, None)
        else:
            app = build_app(options)
            async with _in_thread(sock, app):
                yield RunningMock(url, app)
    finally:
        sock.close()


@contextlib.asynccontextmanager
async def _in_thread(sock: socket.socket, app: MockLLMApp) -> AsyncIterator[None]:
    """uvicorn in a thread: its signal handling (``capture_signals``, uvicorn >= 0.29) is skipped off the main thread."""
    from consumers.serving import Server

    server = Server(_config(app))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), name="mock-llm", daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.should_exit = True
        await asyncio.to_thread(thread.join, 10)


@contextlib.asynccontextmanager
async def _in_subprocess(sock: socket.socket, options: MockOptions) -> AsyncIterator[None]:
    args = [
        sys.executable, "-m", "consumers.mock_llm", "--fd", str(sock.fileno()),
        "--latency", str(options.latency_s), "--jitter", str(options.jitter_s),
        "--rate-limit", str(options.rate_limit), "--error-rate", str(options.error_rate),
        "--retry-after", str(options.retry_after_s), "--seed", str(options.seed),
    ]
    if options.key_rps:
        args += ["--key-rps", str(options.key_rps)]
    proc = subprocess.Popen(args, pass_fds=[sock.fileno()])
    try:
        yield
    finally:
        proc.terminate()
        try:
            await asyncio.to_thread(proc.wait, 10)
        except subprocess.TimeoutExpired:
            proc.kill()
            await asyncio.to_thread(proc.wait, 5)


def _main(argv: list[str] | None = None) -> None:
    """``python -m consumers.mock_llm``: used by ``running_mock_llm(subprocess_=True)``; the CLI is ``streamcrew mock-llm``."""
    import argparse

    parser = argparse.ArgumentParser(prog="mock-llm")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--fd", type=int)
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--jitter", type=float, default=0.0)
    parser.add_argument("--rate-limit", type=float, default=0.0)
    parser.add_argument("--error-rate", type=float, default=0.0)
    parser.add_argument("--key-rps", type=float)
    parser.add_argument("--retry-after", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    a = parser.parse_args(argv)
    serve(a.host, a.port, latency_s=a.latency, jitter_s=a.jitter, rate_limit=a.rate_limit, error_rate=a.error_rate,
          key_rps=a.key_rps, retry_after_s=a.retry_after, seed=a.seed, fd=a.fd)


if __name__ == "__main__":
    _main()
