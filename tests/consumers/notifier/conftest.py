"""Notifier fixtures: a loopback receiver, notifier processes, results written straight to the results stream."""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from consumers.processes import Child, streamcrew_cmd
from streams.envelope import JobResult, Status, now_ms
from streams.groups import ensure_groups, standard_groups
from streams.keys import NOTIFIER_GROUP, Keys
from tests.consumers.notifier.receiver import Receiver
from tests.support import wait_for_log


def make_secret() -> str:
    return "whsec_" + base64.b64encode(os.urandom(24)).decode()


class NotifierFactory:
    """Starts notifier processes against the test's Redis and prefix (``--allow-private`` unless told otherwise)."""

    def __init__(self, redis_url: str, prefix: str, log_dir: Path, secret: str) -> None:
        self.redis_url = redis_url
        self.prefix = prefix
        self.log_dir = log_dir
        self.secret = secret
        self.children: list[Child] = []

    def start(self, *args: str, allow_private: bool = True, env: dict[str, str] | None = None) -> Child:
        base_env = {"STREAMCREW_REDIS_URL": self.redis_url, "STREAMCREW_PREFIX": self.prefix,
                    "STREAMCREW_METRICS_PORT": "0", "STREAMCREW_WEBHOOK_SECRET": self.secret}
        argv = streamcrew_cmd("notifier", *(["--allow-private"] if allow_private else []), *args)
        child = Child(argv, env={**base_env, **(env or {})}, log_path=self.log_dir / f"notifier-{len(self.children)}.log")
        self.children.append(child)
        wait_for_log(child, " ready: ")
        return child

    def close(self) -> None:
        for child in self.children:
            if child.alive():
                child.kill()


@pytest.fixture
def secret() -> str:
    return make_secret()


@pytest.fixture
def notifiers(redis_url: str, prefix: str, tmp_path: Path, secret: str) -> Iterator[NotifierFactory]:
    factory = NotifierFactory(redis_url, prefix, tmp_path, secret)
    yield factory
    factory.close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver().start()
    yield r
    r.stop()


async def add_result(redis: Redis, keys: Keys, job_id: str, webhook: str | None, *, agent: str = "echo",
                     status: Status = Status.COMPLETED, result: Any = None, tenant: str | None = None) -> str:
    """XADD one result event, as a worker would (the notifier's input contract)."""
    await ensure_groups(redis, standard_groups(keys))
    t = now_ms()
    event = JobResult(id=job_id, agent=agent, status=status, attempts=1, submitted_at=t - 5, started_at=t - 3,
                      finished_at=t, worker="test", webhook=webhook, tenant=tenant,
                      result=(result if result is not None else {"echo": {"n": job_id}}) if status == Status.COMPLETED else None,
                      error=None if status == Status.COMPLETED else "it broke")
    return str(await redis.xadd(keys.results, event.to_fields()))


async def pending(redis: Redis, keys: Keys) -> int:
    """Results entries the notifier group holds unacknowledged."""
    info = await redis.xpending(keys.results, NOTIFIER_GROUP)
    return int(info["pending"])
