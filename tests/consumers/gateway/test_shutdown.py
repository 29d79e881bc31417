"""A gateway stopped by SIGTERM or SIGINT finishes the requests in flight, then exits 0, as the worker and notifier do."""

from __future__ import annotations

import asyncio
import signal

import pytest
from redis.asyncio import Redis

from streams.embedded import RedisServer
from tests.consumers.gateway.support import GatewayFactory
from tests.support import wait_for_log, wait_until


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_a_signal_finishes_the_request_in_flight_then_exits_0(gateways: GatewayFactory, own_redis: RedisServer,
                                                                    signum: signal.Signals) -> None:
    # Given a gateway whose submission is in flight: Redis holds its write back (CLIENT PAUSE WRITE) for now
    gateway = await gateways.start({"STREAMCREW_REQUEST_TIMEOUT_S": "60"}, redis_url=own_redis.url)
    async with Redis.from_url(own_redis.url, decode_responses=True) as admin, gateway.client() as client:
        await admin.execute_command("CLIENT", "PAUSE", "60000", "WRITE")
        try:
            submit = asyncio.create_task(client.post("/jobs", json={"agent": "echo", "data": {}, "id": "in-flight"}))

            async def write_held_back() -> bool:
                assert not submit.done(), f"answered while Redis held writes back: {submit.result()}"
                return any("b" in c["flags"] for c in await admin.client_list())

            await wait_until(write_held_back, timeout=10, what="the gateway's write to wait on the paused Redis")
            # When the gateway gets the signal, and Redis takes writes again once it is shutting down
            gateway.child.process.send_signal(signum)
            await asyncio.to_thread(wait_for_log, gateway.child, "Waiting for connections to close", timeout=10)
        finally:
            await admin.execute_command("CLIENT", "UNPAUSE")
        answer = await asyncio.wait_for(submit, 10)
    code = await asyncio.to_thread(gateway.child.wait, 15)
    # Then the request in flight got its answer, and the gateway exited 0 (not 128 + the signal's number)
    assert (answer.status_code, answer.json()["job_id"]) == (202, "in-flight"), answer.text
    assert code == 0, f"exit code {code}:\n{gateway.child.log_text()[-3000:]}"
    assert "Traceback" not in gateway.child.log_text()
