"""Idle HTTP connections: the gateway keeps them longer than uvicorn's 5 s, so a pooled client (or a load balancer)
does not send a request on a connection the gateway is closing at that moment ("Server disconnected without sending
a response", a 502 behind a proxy)."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import h11

from tests.consumers.gateway.support import GatewayFactory

UVICORN_DEFAULT_S = 5.0


class Connection:
    """One HTTP/1.1 connection to the gateway, framed by h11."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.h11 = h11.Connection(h11.CLIENT)

    @classmethod
    async def open(cls, url: str) -> Connection:
        parts = urlsplit(url)
        return cls(*await asyncio.open_connection(parts.hostname, parts.port))

    async def get(self, path: str) -> int:
        """Send a GET and read its whole answer; the status code."""
        if self.h11.our_state is h11.DONE:
            self.h11.start_next_cycle()
        self.writer.write(self.h11.send(h11.Request(method="GET", target=path, headers=[("host", "gateway")])))
        self.writer.write(self.h11.send(h11.EndOfMessage()))
        await self.writer.drain()
        status = 0
        while True:
            event = self.h11.next_event()
            if event is h11.NEED_DATA:
                self.h11.receive_data(await asyncio.wait_for(self.reader.read(65536), 10))
            elif isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.EndOfMessage):
                return status
            elif isinstance(event, h11.ConnectionClosed):
                raise AssertionError("the gateway closed the connection before its answer")

    async def closed_within(self, seconds: float) -> bool:
        """True when the gateway closes the idle connection within ``seconds``."""
        try:
            return await asyncio.wait_for(self.reader.read(1), seconds) == b""
        except TimeoutError:
            return False

    def close(self) -> None:
        self.writer.close()


async def test_an_idle_connection_outlives_uvicorns_default_keep_alive(gateways: GatewayFactory) -> None:
    gateway = await gateways.start()
    connection = await Connection.open(gateway.url)
    try:
        assert await connection.get("/healthz") == 200
        # Given a connection left idle past uvicorn's own 5 s
        assert not await connection.closed_within(UVICORN_DEFAULT_S + 1.5), "the gateway closed an idle connection within 6.5 s"
        # Then it still carries the next request
        assert await connection.get("/healthz") == 200
    finally:
        connection.close()


async def test_the_keep_alive_is_the_setting(gateways: GatewayFactory) -> None:
    gateway = await gateways.start({"STREAMCREW_KEEP_ALIVE_S": "0.5"})
    connection = await Connection.open(gateway.url)
    try:
        assert await connection.get("/healthz") == 200
        assert await connection.closed_within(3), "the idle connection was still open 3 s after STREAMCREW_KEEP_ALIVE_S=0.5"
    finally:
        connection.close()
