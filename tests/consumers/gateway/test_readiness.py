"""/readyz follows Redis: 503 while it is stopped, 200 again once it is back; /healthz never changes."""

from __future__ import annotations

import httpx

from streams.embedded import RedisServer
from tests.consumers.gateway.support import GatewayFactory
from tests.support import wait_until


async def test_readyz_fails_while_redis_is_stopped_and_recovers(gateways: GatewayFactory, own_redis: RedisServer) -> None:
    # Given a gateway on a Redis that answers
    gateway = await gateways.start(redis_url=own_redis.url)
    async with gateway.client() as client:
        assert (await client.get("/readyz")).status_code == 200

        # When Redis stops
        own_redis.stop()

        async def status(path: str) -> int:
            return (await client.get(path)).status_code

        # Then /readyz turns 503 with the error shape, /healthz stays 200, and a submission is a clean 503
        await wait_until(lambda: _is(status("/readyz"), 503), timeout=10, what="/readyz to fail")
        down = await client.get("/readyz")
        assert down.json()["error"]["code"] == "not_ready"
        # And, needing no key, it does not tell where Redis is
        port = own_redis.url.rsplit(":", 1)[1].split("/")[0]
        assert port not in down.text and "127.0.0.1" not in down.text, down.text
        assert await status("/healthz") == 200
        # And a HEAD probe (load balancers, uptime checkers) gets the same status, without a body
        for path, expected in (("/healthz", 200), ("/readyz", 503)):
            head = await client.head(path)
            assert (head.status_code, head.content) == (expected, b""), (path, head.status_code, head.content)
        refused = await client.post("/jobs", json={"agent": "echo", "data": {}})
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "redis_unavailable"

        # When Redis comes back on the same port
        own_redis.start()
        # Then /readyz recovers and submissions work again
        await wait_until(lambda: _is(status("/readyz"), 200), timeout=10, what="/readyz to recover")
        assert (await client.post("/jobs", json={"agent": "echo", "data": {}})).status_code == 202
        assert (await client.head("/readyz")).status_code == 200


async def _is(status: object, expected: int) -> bool:
    try:
        return await status == expected  # type: ignore[misc]
    except httpx.TransportError:
        return False
