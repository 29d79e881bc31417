"""What redis-py raises while a Redis Cluster fails over is answered 503 with Retry-After, never 500.

The real failover (tests/cluster/test_zz_failover.py) shows the connection errors; CLUSTERDOWN and
TRYAGAIN come only in a narrow window of it, so each error is raised here by a route of an app with
the gateway's handlers (Starlette picks the first class of the exception's MRO with a handler).
"""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI
from redis.exceptions import (
    ClusterCrossSlotError,
    ClusterDownError,
    ClusterError,
    ConnectionError,
    MasterDownError,
    ReadOnlyError,
    RedisClusterException,
    SlotNotCoveredError,
    TryAgainError,
)

from consumers.gateway import errors


def unreachable_cluster() -> RedisClusterException:
    try:
        try:
            raise ConnectionError("Error 111 connecting to 127.0.0.1:7000. Connection refused.")
        except ConnectionError as exc:
            raise RedisClusterException("Redis Cluster cannot be connected.") from exc
    except RedisClusterException as exc:
        return exc


async def answer(exc: Exception) -> tuple[int, dict[str, str]]:
    """The answer to a request whose route raises ``exc``, through the gateway's handlers and last resort."""
    app = FastAPI()
    errors.install(app)

    async def failing() -> None:
        raise exc

    app.add_api_route("/jobs/x", failing)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as client:
        response = await client.get("/jobs/x")
    return response.status_code, dict(response.headers)


@pytest.mark.parametrize("exc", [
    ClusterDownError("CLUSTERDOWN The cluster is down"),
    MasterDownError("MASTERDOWN Link with MASTER is down"),
    TryAgainError("TRYAGAIN Multiple keys request during rehashing of slot"),
    ClusterError("TTL exhausted."),
    ReadOnlyError("READONLY You can't write against a read only replica."),
    SlotNotCoveredError("Slot 0 not covered by the cluster."),
    unreachable_cluster(),
], ids=lambda e: type(e).__name__)
async def test_a_failover_error_is_a_503_with_retry_after(exc: Exception) -> None:
    status, headers = await answer(exc)
    assert status == 503 and headers["retry-after"] == "1"


@pytest.mark.parametrize("exc", [ClusterCrossSlotError("CROSSSLOT Keys in request don't hash to the same slot"),
                                 RedisClusterException("No way to dispatch this command to Redis Cluster.")],
                         ids=lambda e: type(e).__name__)
async def test_a_programming_error_stays_a_500(exc: Exception) -> None:
    assert (await answer(exc))[0] == 500
