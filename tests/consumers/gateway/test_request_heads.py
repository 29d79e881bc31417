"""Request heads are bounded in size, time and number of header fields before any key is checked: one connection
sending an endless header, or many never finishing a request, or heads of thousands of tiny fields, must not slow other
clients or take the gateway's file descriptors."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import h11

from consumers.gateway.protocol import MAX_HEAD_BYTES, MAX_HEADERS
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


def _head(fields: int, path: str = "/healthz") -> bytes:
    """A GET with exactly ``fields`` header fields (host among them)."""
    return (f"GET {path} HTTP/1.1\r\nhost: gateway\r\n".encode()
            + b"".join(b"x-field-%d: v\r\n" % i for i in range(fields - 1)) + b"\r\n")


async def _until_closed(reader: asyncio.StreamReader, within_s: float) -> tuple[bytes, bool]:
    """What the gateway sent (b"reset" as :func:`_answer`), and whether it closed the connection within ``within_s``."""
    got, deadline = b"", asyncio.get_running_loop().time() + within_s
    try:
        while chunk := await asyncio.wait_for(reader.read(65536), max(0.0, deadline - asyncio.get_running_loop().time())):
            got += chunk
        return got, True
    except (ConnectionResetError, BrokenPipeError):
        return got or b"reset", True
    except TimeoutError:
        return got, False


async def _statuses(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, heads: list[bytes]) -> list[int]:
    """Send each head on the one connection in turn, reading its whole answer (h11) before the next; their statuses."""
    conn, statuses = h11.Connection(h11.CLIENT), []
    for head in heads:
        if conn.our_state is h11.DONE:
            conn.start_next_cycle()
        conn.send(h11.Request(method="GET", target="/healthz", headers=[("host", "gateway")]))  # h11's state; bytes: ours
        conn.send(h11.EndOfMessage())
        writer.write(head)
        await writer.drain()
        while (event := conn.next_event()) is not h11.PAUSED:
            if event is h11.NEED_DATA:
                conn.receive_data(await asyncio.wait_for(reader.read(65536), 10))
            elif isinstance(event, h11.Response):
                statuses.append(event.status_code)
            elif isinstance(event, h11.ConnectionClosed):
                raise AssertionError(f"closed before an answer; answered so far: {statuses}")
            if conn.their_state is h11.DONE:
                break
    return statuses


async def test_a_head_with_more_fields_than_the_limit_is_refused_and_the_connection_closed(gateways: GatewayFactory) -> None:
    # Given a request with one header field more than the limit
    gateway = await gateways.start()
    reader, writer = await _open(gateway.url)
    writer.write(_head(MAX_HEADERS + 1))
    await writer.drain()
    # Then it is answered 431 (400 would do: uvicorn's invalid request) and closed: it was served 200, kept open
    answer, closed = await _until_closed(reader, 5)
    writer.close()
    assert answer.startswith((b"HTTP/1.1 431 ", b"HTTP/1.1 400 ")) and b"connection: close" in answer.lower(), answer[:300]
    assert closed
    # And so is a head of ~16,000 tiny fields ("a:" each, under the head's 64 KiB), its fields not parsed past the limit
    reader, writer = await _open(gateway.url)
    writer.write(b"GET /healthz HTTP/1.1\r\nhost: gateway\r\n" + b"a:\r\n" * ((MAX_HEAD_BYTES - 200) // 4) + b"\r\n")
    await writer.drain()
    answer, closed = await _until_closed(reader, 5)
    writer.close()
    assert answer.startswith((b"HTTP/1.1 431 ", b"HTTP/1.1 400 ")) or answer == b"reset", answer[:300]
    assert closed
    # And a request with exactly the limit, on a new connection, is served, as is a usual one
    reader, writer = await _open(gateway.url)
    assert await _statuses(reader, writer, [_head(MAX_HEADERS)]) == [200]
    writer.close()
    async with gateway.client() as client:
        assert (await client.get("/healthz")).status_code == 200


async def test_the_fields_are_counted_per_request_on_a_kept_alive_connection(gateways: GatewayFactory) -> None:
    # Given one connection sending two requests in turn, each with one field under the limit (199 fields in all)
    gateway = await gateways.start()
    reader, writer = await _open(gateway.url)
    # Then both are served: the count starts again with each request
    assert await _statuses(reader, writer, [_head(MAX_HEADERS - 1), _head(MAX_HEADERS - 1)]) == [200, 200]
    writer.close()


async def test_a_chunked_bodys_trailer_fields_count_with_its_head(gateways: GatewayFactory) -> None:
    # Given a chunked request whose head has 10 fields and whose trailer has as many as the limit (uvicorn hands
    # trailer fields to the same callback: unbounded, they would cost what head fields do, past the head's size bound)
    gateway = await gateways.start()
    reader, writer = await _open(gateway.url)
    head = _head(10).replace(b"\r\n\r\n", b"\r\ntransfer-encoding: chunked\r\n\r\n")
    writer.write(head + b"1\r\na\r\n0\r\n" + b"".join(b"x-trailer-%d: v\r\n" % i for i in range(MAX_HEADERS)) + b"\r\n")
    await writer.drain()
    # Then the request is refused and the connection closed, its trailer not read to the end (it was served 200)
    answer, closed = await _until_closed(reader, 5)
    writer.close()
    assert answer.startswith((b"HTTP/1.1 431 ", b"HTTP/1.1 400 ")) or answer in (b"", b"reset"), answer[:300]
    assert closed


async def test_trailer_fields_past_the_limit_after_the_answer_add_no_second_answer(gateways: GatewayFactory) -> None:
    # Given a chunked POST answered 401 before its body is read (no key), whose trailer then passes the limit
    gateway = await gateways.start({"STREAMCREW_API_KEYS": "k-operator"})
    reader, writer = await _open(gateway.url)
    writer.write(b"POST /jobs HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n")
    await writer.drain()
    first = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    assert first.startswith(b"HTTP/1.1 401 "), first
    writer.write(b"2\r\n{}\r\n0\r\n" + b"".join(b"x-trailer-%d: v\r\n" % i for i in range(MAX_HEADERS + 1)) + b"\r\n")
    await writer.drain()
    # Then the connection is closed with no status line after the 401 (a second answer no request asked for)
    rest, closed = await _until_closed(reader, 5)
    writer.close()
    assert closed and b"HTTP/1.1 " not in rest, rest[:300]
