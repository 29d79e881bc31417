"""The last resort: an unexpected error is one 500 and one logged traceback; a client that hangs up is no error.

These serve the app in this process (real uvicorn, real HTTP on loopback), so a test can add a failing
route and see every log record.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from prometheus_client import REGISTRY

from consumers.gateway import GatewaySettings, create_app
from consumers.gateway import app as gateway_app
from streams.embedded import free_port
from tests.support import wait_until


@asynccontextmanager
async def serving(app: FastAPI) -> AsyncIterator[int]:
    """``app`` under uvicorn on a free loopback port, as ``streamcrew gateway`` serves it; yields the port."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="on", log_config=None, server_header=False))
    task = asyncio.create_task(server.serve())

    def started() -> bool:
        assert not task.done(), "uvicorn exited"
        return server.started

    await wait_until(started, timeout=10, what="uvicorn to start")
    try:
        yield port
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


def requests_counted(method: str, route: str, status: int) -> float:
    labels = {"method": method, "route": route, "status": str(status)}
    return REGISTRY.get_sample_value("streamcrew_http_requests_total", labels) or 0.0


@pytest.fixture
def app(redis_url: str, prefix: str, redis, monkeypatch: pytest.MonkeyPatch) -> FastAPI:  # type: ignore[no-untyped-def]
    # The stream gauges go to the process-wide registry, where another prefix's would clash by name: not tested here.
    monkeypatch.setattr(gateway_app, "register_stream_gauges", lambda *args, **kwargs: None)
    return create_app(GatewaySettings(redis_url=redis_url, prefix=prefix), redis)


async def test_a_client_that_hangs_up_mid_body_is_499_and_not_logged(app: FastAPI, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with serving(app) as port:
        before = {status: requests_counted("POST", "/jobs", status) for status in (499, 500)}
        # When a client announces 1000 bytes of body, sends 8 and hangs up
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /jobs HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
                     b'{"agent"')
        await writer.drain()
        writer.close()
        await writer.wait_closed()

        def counted() -> bool:
            return any(requests_counted("POST", "/jobs", status) > before[status] for status in (499, 500))

        # Then the request is counted as 499 (client closed request), not as a 500
        await wait_until(counted, timeout=10, what="the request to be counted")
        assert requests_counted("POST", "/jobs", 499) == before[499] + 1
        assert requests_counted("POST", "/jobs", 500) == before[500]
    # And nothing was logged above debug: no error, no traceback
    loud = [f"{r.name} {r.levelname} {r.getMessage()}" for r in caplog.records if r.levelno > logging.INFO or r.exc_info]
    assert not loud, loud


async def test_an_unexpected_error_is_a_500_in_the_api_shape_logged_once(app: FastAPI, caplog: pytest.LogCaptureFixture) -> None:
    # Given a route that fails in a way no handler knows
    async def broken() -> None:
        raise RuntimeError("a bug")

    app.add_api_route("/broken", broken)
    async with serving(app) as port, httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
        before = requests_counted("GET", "/broken", 500)
        # When it is called
        answer = await client.get("/broken")
        # Then the answer is a 500 in the shared error shape, counted once
        assert answer.status_code == 500
        assert answer.json() == {"error": {"code": "internal_error", "message": "internal server error"}}
        assert requests_counted("GET", "/broken", 500) == before + 1
    # And its traceback was logged once, by the gateway, not again by uvicorn
    logged = [r for r in caplog.records if r.exc_info]
    assert [(r.name, r.getMessage()) for r in logged] == [("streamcrew.gateway", "unhandled error on GET /broken")]
    assert isinstance(logged[0].exc_info[1], RuntimeError)  # type: ignore[index]
