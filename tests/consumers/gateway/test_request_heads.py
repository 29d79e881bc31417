"""Request heads are bounded in size and time before any key is checked: one connection sending an endless header,
or many never finishing a request, must not slow other clients or take the gateway's file descriptors."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

from consumers.gateway.protocol import MAX_HEAD_BYTES
from tests.consumers.gateway.support import GatewayFactory
from tests.consumers.gateway.test_keep_alive import Connection


async def _open(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    parts = urlsplit(url)
    return await asyncio.open_connection(parts.hostname, parts.port)


async def _answer(reader: asyncio.StreamReader, within_s: float) -> bytes:
    """What the gateway sent before it closed the connection (b"" when it closed without a word); b"reset" when the
    close reset the connection (bytes the client sent were still unread: the answer may be lost with them), or the
    client's own write met the close (a broken pipe: asyncio's reader then raises it before any answer it holds)."""
    try:
        return await asyncio.wait_for(reader.read(), within_s)
    except (ConnectionResetError, BrokenPipeError):
        return b"reset"


async def test_a_head_past_the_limit_is_refused_and_the_connection_closed(gateways: GatewayFactory) -> None:
    # Given a client that starts a request and then sends one header without end, 8 KiB at a time (up to 4 MiB: what
    # the socket buffers hold on top of what the gateway read makes the bytes sent before the close no exact figure)
    gateway = await gateways.start()
    reader, writer = await _open(gateway.url)
    writer.write(b"GET /healthz HTTP/1.1\r\nhost: gateway\r\nx-endless: ")
    sent = 0
    try:
        while sent < 64 * MAX_HEAD_BYTES and not reader.at_eof():  # bounded: 4 MiB, uvicorn alone took 300 MiB and more
            writer.write(b"a" * 8192)
            await asyncio.wait_for(writer.drain(), 10)  # a peer that stopped reading without closing: on to the answer
            sent += 8192
    except (ConnectionError, TimeoutError):
        pass  # the gateway closed it (what it answered is in the reader), or stopped reading
    # Then it is answered 431 and closed soon after the limit (uvicorn kept the growing header, and stalled re-parsing it)
    answer = await _answer(reader, 10)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 431 ") or answer == b"reset", answer[:200]
    # (how much the client wrote before it noticed is the kernel's buffers' business: on the floor releases' event loop
    # all 4 MiB went into them; what is the gateway's is that it answered and closed, and read no more)
    # And other clients are served, as is a head just under the limit
    async with gateway.client() as client:
        assert (await client.get("/healthz")).status_code == 200
        assert (await client.get("/healthz", headers={"x-large": "b" * (MAX_HEAD_BYTES // 2)})).status_code == 200


async def test_connections_that_never_finish_a_head_are_closed_after_the_setting(gateways: GatewayFactory) -> None:
    # Given a gateway with a 1 s head timeout, a connection that sends nothing, one that sends half a head, and one
    # that finishes a request and then starts another it never finishes
    gateway = await gateways.start({"STREAMCREW_HEAD_TIMEOUT_S": "1"})
    silent, _ = await _open(gateway.url)
    half, half_writer = await _open(gateway.url)
    half_writer.write(b"GET /healthz HTTP/1.1\r\nhost: gat")
    await half_writer.drain()
    reused = await Connection.open(gateway.url)
    assert await reused.get("/healthz") == 200
    reused.writer.write(b"GET /healthz HTTP/1.1\r\nhos")
    await reused.writer.drain()
    # Then each is closed within a few seconds (they stayed open for good: a client could take every file descriptor),
    # the unfinished heads answered 408
    assert (await _answer(silent, 5)).startswith(b"HTTP/1.1 408 ")
    assert (await _answer(half, 5)).startswith(b"HTTP/1.1 408 ")
    assert (await _answer(reused.reader, 5)).startswith(b"HTTP/1.1 408 ")
    # And a connection used for longer than that is not cut by it (the timeout is per head, not per connection)
    busy = await Connection.open(gateway.url)
    for _ in range(4):
        assert await busy.get("/healthz") == 200
        await asyncio.sleep(0.4)  # the time between requests itself, not a wait for an event
    busy.close()


async def test_pipelined_requests_are_not_taken_for_one_long_head(gateways: GatewayFactory) -> None:
    # Given a client that pipelines 5,000 requests on one connection (a load tool, a proxy): 190 KB in a few reads
    gateway = await gateways.start()
    reader, writer = await _open(gateway.url)
    n = 5000
    writer.write(b"GET /healthz HTTP/1.1\r\nhost: gateway\r\n\r\n" * n)
    await writer.drain()
    # Then every one is answered 200 (a read of over 64 KiB ending part-way through a head was counted as one head: 431)
    answers = b""
    try:
        while answers.count(b"HTTP/1.1 ") < n:
            chunk = await asyncio.wait_for(reader.read(1 << 16), 30)
            if not chunk:
                break
            answers += chunk
    except ConnectionResetError:
        pass
    writer.close()
    assert answers.count(b"HTTP/1.1 200 ") == n, (answers.count(b"HTTP/1.1 200 "), answers[-300:])
