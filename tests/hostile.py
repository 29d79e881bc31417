"""A hostile HTTP peer on 127.0.0.1 for the tests: raw bytes out, whatever the script says.

The server reads each request (head, then ``content-length`` bytes) and hands
its number (1, 2, ...) to ``answer``, which writes any bytes it likes and
returns False to close the connection. It counts connections and requests, so
a test can see how often a client really sent something.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

Answer = Callable[[asyncio.StreamWriter, int], Awaitable[bool]]


class HostilePeer:
    """One loopback listener; ``url`` is ``http://127.0.0.1:<port>``."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.connections = 0
        self.requests = 0
        self.heads: list[bytes] = []
        self.bodies: list[bytes] = []
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()

    async def start(self, ssl: object = None) -> HostilePeer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=ssl)  # type: ignore[arg-type]
        return self

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.heads.append(head)
                length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length")), 0)
                self.bodies.append(await reader.readexactly(length))
                self.requests += 1
                if not await self.answer(writer, self.requests):
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()
            self._handlers.discard(task)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._handlers):
                task.cancel()
            await asyncio.gather(*self._handlers, return_exceptions=True)


def response(status: int, body: bytes = b"ok", *, reason: str = "X", headers: str = "") -> bytes:
    """One complete HTTP/1.1 response with a content-length."""
    return f"HTTP/1.1 {status:03d} {reason}\r\ncontent-length: {len(body)}\r\n{headers}\r\n".encode() + body


Start = Callable[[Answer], Awaitable[HostilePeer]]


async def started_peers() -> AsyncIterator[Start]:
    """A fixture body: start hostile peers on demand, stop every one at teardown."""
    peers: list[HostilePeer] = []

    async def start(answer: Answer) -> HostilePeer:
        p = await HostilePeer(answer).start()
        peers.append(p)
        return p

    yield start
    for p in peers:
        await p.stop()
