"""Gateway processes for the tests: real uvicorn on a free loopback port."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx

from consumers import cli
from consumers.processes import Child, streamcrew_cmd
from tests.support import start_on_drawn_port, wait_until



def gateway_cmd(*args: str) -> list[str]:
    """``streamcrew gateway`` once the CLI has it, else the package's own entry point."""
    if hasattr(cli, "gateway"):
        return streamcrew_cmd("gateway", *args)
    return [sys.executable, "-m", "consumers.gateway", *args]


class Gateway:
    def __init__(self, child: Child, port: int) -> None:
        self.child = child
        self.port = port
        self.url = f"http://127.0.0.1:{port}"

    def client(self, key: str | None = None) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {key}"} if key else None
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=10)


class GatewayFactory:
    """Starts gateways against the test's Redis and prefix; ``env`` adds STREAMCREW_* settings."""

    def __init__(self, redis_url: str, prefix: str, log_dir: Path) -> None:
        self.redis_url = redis_url
        self.prefix = prefix
        self.log_dir = log_dir
        self.gateways: list[Gateway] = []

    async def start(self, env: dict[str, str] | None = None, *, redis_url: str | None = None) -> Gateway:
        """A gateway serving on a port of its own (see :func:`tests.support.start_on_drawn_port`: uvicorn writes
        "Uvicorn running on" once it holds the socket), once it answers /healthz."""
        base = {"STREAMCREW_REDIS_URL": redis_url or self.redis_url, "STREAMCREW_PREFIX": self.prefix,
                "STREAMCREW_SSE_POLL_S": "0.02", "STREAMCREW_SSE_POLL_MAX_S": "0.1"}

        def start(port: int) -> Child:
            log_path = self.log_dir / f"gateway-{len(self.gateways)}.log"
            child = Child(gateway_cmd("--host", "127.0.0.1", "--port", str(port)), env={**base, **(env or {})}, log_path=log_path)
            self.gateways.append(Gateway(child, port))
            return child

        child, port = start_on_drawn_port(start, lambda port: f"Uvicorn running on http://127.0.0.1:{port} ", what="the gateway",
                                          timeout=20)
        gateway = self.gateways[-1]

        async def answers() -> bool:
            assert child.alive(), f"gateway exited:\n{child.log_text()[-3000:]}"
            try:
                async with gateway.client() as c:
                    return (await c.get("/healthz")).status_code == 200
            except httpx.TransportError:
                return False

        await wait_until(answers, timeout=20, what=f"the gateway on port {port} to answer /healthz")
        return gateway

    def close(self) -> None:
        for gateway in self.gateways:
            if gateway.child.alive():
                gateway.child.stop(timeout=10)


@asynccontextmanager
async def sse_events(
    client: httpx.AsyncClient, path: str, *, headers: dict[str, str] | None = None,
) -> AsyncIterator[AsyncIterator[dict[str, str]]]:
    """Parse a text/event-stream into dicts of its fields (``event``, ``id``, ``data``, ``retry``)."""
    async with client.stream("GET", path, headers=headers) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")

        async def events() -> AsyncIterator[dict[str, str]]:
            fields: dict[str, str] = {}
            async for line in response.aiter_lines():
                if not line:
                    if fields:
                        yield fields
                    fields = {}
                elif not line.startswith(":"):
                    name, _, value = line.partition(":")
                    fields[name] = value.removeprefix(" ")

        yield events()
