"""What one tenant's large job bodies, or reads of a large result, cost another tenant's requests on one gateway, same run.

    .venv/bin/python -m bench.bench_neighbour [--bodies 6] [--rounds 20] [--body-mib 1.9] [--reads N]

Starts redis-server (unless ``--redis-url``) and one ``streamcrew gateway`` with two tenant-bound keys.
Each round, tenant ``mallory`` sends ``--bodies`` job bodies of ``--body-mib`` MiB at once (a valid job each
below STREAMCREW_MAX_REQUEST_BYTES, refused 413 above it: both are parsed; past 16 waiting, 429) while tenant ``alice`` asks for
her job's status a few times; the same is measured with no large bodies sent. Prints alice's latency
(median, max) both ways and their ratio: a gateway that parses one large body per caller at a time
(consumers.gateway.large_bodies) keeps alice waiting for about one body's parse, not for all of them.

With ``--reads N``, mallory instead reads her own completed job's result N times at once (``GET /jobs/{id}/result``),
a result of ``--body-mib`` MiB of empty lists (what costs a parser most per byte), written into its record as a
worker's settle does; the gateway parses a stored result to answer it, in the same turns.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson

from bench.bench_gateway import start_gateway
from bench.common import bench_redis, new_prefix
from streams.connection import connect
from streams.embedded import free_port
from streams.keys import Keys

KEYS = "alice-key:alice,mallory-key:mallory"
PROBES = 8
LARGE_RESULT_JOB = "mallory-large-result"


def large_body(mib: float) -> bytes:
    """A job whose data has many small fields: what costs a parser most per byte."""
    n = int(mib * 1_048_576 / 18)
    return orjson.dumps({"agent": "echo", "data": {f"k{i:07d}": i for i in range(n)}})


async def alice_waits(session: aiohttp.ClientSession, base: str, job_id: str) -> list[float]:
    """Seconds each of alice's status requests took, one after another."""
    waits = []
    for _ in range(PROBES):
        t0 = time.perf_counter()
        async with session.get(f"{base}/jobs/{job_id}", headers={"Authorization": "Bearer alice-key"}) as r:
            await r.read()
            assert r.status == 200, r.status
        waits.append(time.perf_counter() - t0)
    return waits


async def mallory_sends(session: aiohttp.ClientSession, base: str, body: bytes, count: int) -> list[int]:
    headers = {"Authorization": "Bearer mallory-key", "Content-Type": "application/json"}

    async def one() -> int:
        async with session.post(f"{base}/jobs", data=body, headers=headers) as r:
            await r.read()
            return r.status

    return list(await asyncio.gather(*(one() for _ in range(count))))


async def mallory_reads(session: aiohttp.ClientSession, base: str, count: int) -> list[int]:
    async def one() -> int:
        async with session.get(f"{base}/jobs/{LARGE_RESULT_JOB}/result", headers={"Authorization": "Bearer mallory-key"}) as r:
            await r.read()
            return r.status

    return list(await asyncio.gather(*(one() for _ in range(count))))


def large_result(mib: float) -> str:
    return orjson.dumps([[] for _ in range(int(mib * 1_048_576 / 3))]).decode()


async def store_large_result(url: str, prefix: str, mib: float) -> None:
    """Mallory's completed job with a large result, as settle.lua leaves its record."""
    redis = connect(url)
    try:
        await redis.hset(Keys(prefix).job(LARGE_RESULT_JOB), mapping={
            "status": "completed", "agent": "echo", "attempts": "1", "tenant": "mallory", "result": large_result(mib),
            "submitted_at": "1700000000000", "started_at": "1700000000100", "finished_at": "1700000001000"})
    finally:
        await redis.aclose()


async def measure(port: int, bodies: int, rounds: int, mib: float, reads: int) -> tuple[list[float], list[float], list[int]]:
    base = f"http://127.0.0.1:{port}"
    body = b"" if reads else large_body(mib)
    quiet: list[float] = []
    loaded: list[float] = []
    statuses: list[int] = []
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(base, connector=connector) as session:
        async with session.post("/jobs", json={"agent": "echo", "data": {}}, headers={"Authorization": "Bearer alice-key"}) as r:
            job_id = (await r.json())["job_id"]
        for _ in range(rounds):
            quiet += await alice_waits(session, base, job_id)
            sending = asyncio.create_task(mallory_reads(session, base, reads) if reads else mallory_sends(session, base, body, bodies))
            await asyncio.sleep(0.02)  # mallory's bodies on the wire first
            loaded += await alice_waits(session, base, job_id)
            statuses += await sending
    return quiet, loaded, statuses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bodies", type=int, default=6, help="large bodies mallory sends at once")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--body-mib", type=float, default=1.9, help="each body's size (the gateway's body limit is 2 MiB)")
    parser.add_argument("--reads", type=int, default=0, help="mallory reads her large result this many times at once instead")
    parser.add_argument("--redis-url", default=None)
    args = parser.parse_args()
    with bench_redis(args.redis_url) as url, tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        prefix = new_prefix("neighbour")
        if args.reads:
            asyncio.run(store_large_result(url, prefix, args.body_mib))
        child = start_gateway(url, prefix, port, Path(tmp), KEYS)
        try:
            quiet, loaded, statuses = asyncio.run(measure(port, args.bodies, args.rounds, args.body_mib, args.reads))
        finally:
            child.stop()
    counts = {s: statuses.count(s) for s in sorted(set(statuses))}
    what = f"{args.reads} reads of a result" if args.reads else f"{args.bodies} bodies"
    print(f"mallory: {args.rounds} rounds of {what} of {args.body_mib} MiB; answers {counts}")
    for label, waits in (("alice alone", quiet), ("alice beside mallory", loaded)):
        print(f"{label:22} median {statistics.median(waits) * 1000:7.1f} ms   max {max(waits) * 1000:7.1f} ms   ({len(waits)} requests)")
    print(f"ratio beside / alone: median {statistics.median(loaded) / statistics.median(quiet):.1f}x, "
          f"max {max(loaded) / max(quiet):.1f}x")


if __name__ == "__main__":
    main()
