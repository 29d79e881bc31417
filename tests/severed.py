"""A loopback TCP link to the test's real Redis that goes away for good at a chosen point, for the tests.

Stopping Redis itself from a test lands at no particular command of a child process; this link cuts at
an exact one: once ``scripts`` script calls (EVALSHA) have been answered, it passes that answer on, then
closes every connection and its listening socket, so every later call, and every reconnect (refused),
fails as against a Redis that went away. A NOSCRIPT answer (redis-py loads the script, then calls again)
is not counted.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit, urlunsplit

SCRIPT_CALL = b"\r\nEVALSHA\r\n"
NOSCRIPT = b"-NOSCRIPT"


class SeveredLink:
    def __init__(self, upstream: str, scripts: int) -> None:
        parts = urlsplit(upstream)
        self._upstream = parts
        self._target = (parts.hostname or "127.0.0.1", parts.port or 6379)
        self.scripts = scripts
        self.answered = 0
        self.cut = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.url = ""

    async def start(self) -> SeveredLink:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        credentials = self._upstream.netloc.rpartition("@")[0]
        self.url = urlunsplit(self._upstream._replace(netloc=f"{credentials + '@' if credentials else ''}127.0.0.1:{port}"))
        return self

    async def _handle(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        if self.cut.is_set():
            client_writer.close()
            return
        server_reader, server_writer = await asyncio.open_connection(*self._target)
        self._writers |= {client_writer, server_writer}
        script_sent = asyncio.Event()  # redis-py waits for each answer: one call at a time per connection

        async def upstream() -> None:
            while data := await client_reader.read(65536):
                if SCRIPT_CALL in data:
                    script_sent.set()
                server_writer.write(data)
                await server_writer.drain()

        async def downstream() -> None:
            while data := await server_reader.read(65536):
                client_writer.write(data)
                await client_writer.drain()
                if script_sent.is_set():
                    script_sent.clear()
                    if not data.startswith(NOSCRIPT):
                        self.answered += 1
                        if self.answered >= self.scripts:
                            self.sever()
                            return

        try:
            await asyncio.gather(upstream(), downstream())
        except (ConnectionError, OSError):
            pass
        finally:
            for writer in (client_writer, server_writer):
                writer.close()

    def sever(self) -> None:
        """Redis goes away: every connection closed, and no new one accepted."""
        self.cut.set()
        if self._server is not None:
            self._server.close()
        for writer in self._writers:
            writer.close()

    async def close(self) -> None:
        self.sever()
        if self._server is not None:
            await self._server.wait_closed()


@asynccontextmanager
async def severed_after(upstream: str, *, scripts: int) -> AsyncIterator[SeveredLink]:
    """A :class:`SeveredLink` to ``upstream`` that goes away once ``scripts`` script calls were answered."""
    link = await SeveredLink(upstream, scripts).start()
    try:
        yield link
    finally:
        await link.close()
