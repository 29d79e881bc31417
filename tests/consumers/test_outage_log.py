"""What a worker logs while its Redis hangs (SIGSTOP: a frozen VM), the lines operators size an outage by.

Before, a call that timed out was sent again by redis-py twice more, unseen, so a loop's first line came only
after three socket timeouts (45 s), or never for a shorter hang; and "back after" was timed from that line,
not from the call that first went unanswered (a 50 s hang read "back after 4.7s"). Now each loop logs one line
at its first timed-out call and one when Redis answers, timed from when that call was sent."""

from __future__ import annotations

import re
import time
from datetime import datetime
from pathlib import Path

from streams.connection import connect
from streams.embedded import RedisServer
from streams.keys import Keys
from streams.producer import Producer
from tests.support import WorkerFactory, stall_redis, wait_until

SOCKET_TIMEOUT_S = 1.5  # the worker's, through its URL: 15 s would make the test last minutes
STALL_MS = 5000  # past one socket timeout, short of redis-py's three tries (3 × 1.5 s plus their backoff)
LINE = re.compile(r"^(\S+ \S+) WARNING streams\.outage (.+?): Redis (unavailable|is back after ([\d.]+)s)", re.M)


def outage_lines(log: str) -> dict[str, list[tuple[float, str, float | None]]]:
    """Each loop's outage lines: (epoch seconds, "unavailable" or "back", the figure of a "back after")."""
    found: dict[str, list[tuple[float, str, float | None]]] = {}
    for stamp, what, kind, seconds in LINE.findall(log):
        at = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()
        found.setdefault(what, []).append((at, "unavailable" if kind == "unavailable" else "back", float(seconds) if seconds else None))
    return found


async def test_a_hang_is_logged_at_the_first_timeout_and_its_end_timed_from_the_first_unanswered_call(
        own_redis: RedisServer, tmp_path: Path) -> None:
    # Given a worker whose Redis client gives a reply up after 1.5 s, running a job that ends in the middle of the hang
    redis = connect(own_redis.url)
    keys = Keys("outage-log")
    workers = WorkerFactory(f"{own_redis.url}?socket_timeout={SOCKET_TIMEOUT_S}", keys.prefix, tmp_path)
    try:
        worker = workers.start("--concurrency", "2", "--lease", "10")
        await Producer(redis, keys).publish("echo", {"sleep_s": 1.0}, id="slow")
        await wait_until(lambda: _running(redis, keys), timeout=30, what="the job to start")

        # When Redis hangs for 5 s
        frozen_at = time.time()
        stall = await stall_redis(own_redis, STALL_MS)
        await stall
        resumed_at = time.time()
        await wait_until(lambda: "read: Redis is back after" in worker.log_text(), timeout=30, what="the read loop's end line")
        log = worker.log_text()

        # Then the read loop said so at its first timed-out call, well before the hang ended (not after three)
        (warned_at, _, _), (_, _, back_after) = next(v for k, v in outage_lines(log).items() if k.endswith(" read"))
        assert warned_at - frozen_at < 2 * SOCKET_TIMEOUT_S and warned_at < resumed_at, (warned_at - frozen_at, log[-4000:])
        # And its end line gives the whole hang, not the time since its first line
        assert back_after is not None and back_after >= STALL_MS / 1000 - 0.5, (back_after, log[-4000:])
        # And the settle writer, whose write was sent during the hang, logged it too, timed from that write: a socket
        # timeout before its first line
        await wait_until(lambda: "settle: Redis is back after" in worker.log_text(), timeout=10, what="the settle writer's end line")
        log = worker.log_text()
        lines = outage_lines(log)
        settle = lines["settle"]
        (settle_warned, _, _), (settle_back, _, settle_after) = settle
        assert settle_after is not None and settle_after >= settle_back - settle_warned + SOCKET_TIMEOUT_S - 0.3, (settle, log[-4000:])
        # And each loop that met the hang logged it once when it began and once when it ended, no line per retry
        assert {k: [kind for _, kind, _ in v] for k, v in lines.items()} == {k: ["unavailable", "back"] for k in lines}, log[-4000:]
    finally:
        workers.close()
        await redis.aclose()


async def _running(redis, keys: Keys) -> bool:  # type: ignore[no-untyped-def]
    return await redis.hget(keys.job("slow"), "status") == "running"
