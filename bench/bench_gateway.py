"""POST /jobs per second on one ``streamcrew gateway`` process, load generated on loopback.

Run: ``python -m bench.bench_gateway`` (add ``--duration S``, ``--connections N``,
``--tool wrk|python``, ``--redis-url URL``, ``--api-key`` to measure with auth on).
It starts its own redis-server unless given a URL, one gateway process on a
free loopback port with a fresh key prefix, warms it up for 1 s, then drives
``POST /jobs`` (an ``echo`` job, no id, so each request queues a new job) for
``--duration`` seconds over ``--connections`` keep-alive connections and prints
jobs/s, the answers by status, the gateway's CPU microseconds per request, and
checks that the lane holds one entry per 202. Target: >= 3,000 jobs/s.

The load generator is ``wrk`` when it is on PATH (``apt-get install -y wrk``),
else aiohttp's client in this process (httpx costs more CPU per request than
the gateway itself); on a 2-core machine the generator shares the cores with
the gateway and Redis, so wrk, written in C, leaves the gateway more of them.
The keys are deleted afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import aiohttp
import httpx
import orjson
import redis as sync_redis

from bench.common import bench_redis, cpu_seconds, new_prefix
from consumers.processes import Child, streamcrew_cmd
from streams.config import StreamSettings
from streams.embedded import free_port

BODY = orjson.dumps({"agent": "echo", "data": {"order_id": "ORD-12345", "n": 1}})
TARGET = 3000
WARMUP_S = 1.0


def start_gateway(url: str, prefix: str, port: int, log_dir: Path, api_key: str | None) -> Child:
    env = {"STREAMCREW_REDIS_URL": url, "STREAMCREW_PREFIX": prefix, "STREAMCREW_LOG_LEVEL": "warning"}
    if api_key:
        env["STREAMCREW_API_KEYS"] = api_key
    from consumers import cli

    args = ("--host", "127.0.0.1", "--port", str(port))
    cmd = streamcrew_cmd("gateway", *args) if hasattr(cli, "gateway") else [sys.executable, "-m", "consumers.gateway", *args]
    child = Child(cmd, env=env, log_path=log_dir / "gateway.log")
    deadline = time.monotonic() + 20
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return child
        except httpx.TransportError:
            pass
        if not child.alive() or time.monotonic() > deadline:
            child.stop()
            raise SystemExit(f"gateway did not start:\n{child.log_text()[-2000:]}")
        time.sleep(0.05)


def run_wrk(port: int, duration: float, connections: int, api_key: str | None) -> tuple[float, Counter[int]]:
    auth = f'wrk.headers["Authorization"] = "Bearer {api_key}"\n' if api_key else ""
    script = f'wrk.method = "POST"\nwrk.body = \'{BODY.decode()}\'\nwrk.headers["Content-Type"] = "application/json"\n{auth}'
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(script)
    out = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(duration))}s", "-s", f.name, f"http://127.0.0.1:{port}/jobs"],
                         capture_output=True, text=True, timeout=duration + 30, check=True).stdout
    Path(f.name).unlink()
    total = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    statuses: Counter[int] = Counter({202: total - (int(bad.group(1)) if bad else 0)})
    if bad:
        statuses[0] = int(bad.group(1))  # wrk does not say which; 0 = "not 2xx"
    return rate, statuses


async def _connection(session: aiohttp.ClientSession, url: str, headers: dict[str, str], stop_at: float, statuses: Counter[int]) -> None:
    """One keep-alive connection's worth of load: the next request as soon as the answer is read."""
    while time.monotonic() < stop_at:
        async with session.post(url, data=BODY, headers=headers) as response:
            await response.read()
            statuses[response.status] += 1


async def _python_load(port: int, duration: float, connections: int, api_key: str | None) -> tuple[float, Counter[int]]:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {api_key}"} if api_key else {})}
    statuses: Counter[int] = Counter()
    connector = aiohttp.TCPConnector(limit=connections)  # one pooled keep-alive connection per request loop
    async with aiohttp.ClientSession(connector=connector, skip_auto_headers=["User-Agent"]) as session:
        start = time.monotonic()
        url = f"http://127.0.0.1:{port}/jobs"
        await asyncio.gather(*(_connection(session, url, headers, start + duration, statuses) for _ in range(connections)))
        return statuses.total() / (time.monotonic() - start), statuses


def run_python(port: int, duration: float, connections: int, api_key: str | None) -> tuple[float, Counter[int]]:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(_python_load(port, duration, connections, api_key))
    return uvloop.run(_python_load(port, duration, connections, api_key))


def delete_prefix(client: sync_redis.Redis, prefix: str) -> None:
    batch = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    for i in range(0, len(batch), 1000):
        client.delete(*batch[i:i + 1000])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of load")
    parser.add_argument("--connections", type=int, default=64, help="concurrent keep-alive connections")
    parser.add_argument("--tool", choices=("auto", "wrk", "python"), default="auto")
    parser.add_argument("--api-key", help="configure this key on the gateway and send it (measures auth)")
    parser.add_argument("--redis-url", help="Redis to use [default: STREAMCREW_REDIS_URL, else a private redis-server]")
    args = parser.parse_args()
    tool = ("wrk" if shutil.which("wrk") else "python") if args.tool == "auto" else args.tool
    load = run_wrk if tool == "wrk" else run_python

    with bench_redis(args.redis_url or StreamSettings().redis_url) as url, tempfile.TemporaryDirectory() as tmp:
        prefix = new_prefix("gateway")
        port = free_port()
        gateway = start_gateway(url, prefix, port, Path(tmp), args.api_key)
        client = sync_redis.Redis.from_url(url, decode_responses=True)
        try:
            run_python(port, WARMUP_S, min(args.connections, 16), args.api_key)
            queued_before = int(client.xlen(f"{prefix}:requests:normal"))
            cpu_before = cpu_seconds(gateway.pid)
            rate, statuses = load(port, args.duration, args.connections, args.api_key)
            cpu_us = (cpu_seconds(gateway.pid) - cpu_before) / max(1, statuses.total()) * 1e6
            queued = int(client.xlen(f"{prefix}:requests:normal")) - queued_before
        finally:
            gateway.stop()
            delete_prefix(client, prefix)
            client.close()

    accepted = statuses.get(202, 0)
    print(f"POST /jobs on one gateway process: {rate:,.0f} jobs/s over {args.duration:.0f} s, "
          f"{args.connections} connections, load by {tool}{', with auth' if args.api_key else ''}")
    print(f"  answers: {dict(statuses)}; lane entries added: {queued:,} (202s: {accepted:,})")
    print(f"  gateway CPU: {cpu_us:,.0f} µs per request")
    print(f"  target {TARGET:,}/s: {'met' if rate >= TARGET else 'NOT met'}")
    if accepted != statuses.total() or (tool == "python" and queued != accepted):
        raise SystemExit("some requests were not accepted, or lane entries do not match the 202s")


if __name__ == "__main__":
    main()
