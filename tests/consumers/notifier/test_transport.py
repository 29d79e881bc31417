"""The notifier's lean HTTP/1.1 transport and codec: keep-alive, stale sockets, framing, timeouts."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import httpx
import pytest

from consumers.notifier.delivery import Deliverer, Kind
from consumers.notifier.http1 import Answer, ProtocolError, encode_request, read_response
from consumers.notifier.signing import Signer
from consumers.notifier.ssrf import SsrfGuard
from consumers.notifier.transport import MAX_BODY_BYTES, LeanTransport

class RawServer:
    """Counts connections; ``answer`` handles each request on a connection until it returns False."""

    def __init__(self, answer: Callable[[asyncio.StreamWriter, int], Awaitable[bool]]) -> None:
        self.answer = answer
        self.connections = 0
        self.requests = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), 0)
                await reader.readexactly(length)
                self.requests += 1
                if not await self.answer(writer, self.requests):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Callable[[asyncio.StreamWriter, int], Awaitable[bool]]], Awaitable[tuple[RawServer, str]]]]:
    servers: list[asyncio.Server] = []

    async def start(answer: Callable[[asyncio.StreamWriter, int], Awaitable[bool]]) -> tuple[RawServer, str]:
        raw = RawServer(answer)
        server = await asyncio.start_server(raw.handle, "127.0.0.1", 0)
        servers.append(server)
        return raw, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/hook"

    yield start
    for server in servers:
        server.close()


def client() -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=LeanTransport(SsrfGuard(allow_private=True)), timeout=httpx.Timeout(2.0))


async def ok(writer: asyncio.StreamWriter, n: int) -> bool:
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
    await writer.drain()
    return True


async def test_connections_are_kept_alive_and_reused(serve) -> None:  # type: ignore[no-untyped-def]
    raw, url = await serve(ok)
    async with client() as c:
        for _ in range(5):
            r = await c.post(url, content=b"{}")
            assert (r.status_code, r.content) == (200, b"ok")
    assert (raw.connections, raw.requests) == (1, 5)


async def test_a_connection_the_server_closed_while_idle_is_replaced(serve) -> None:  # type: ignore[no-untyped-def]
    async def answer_then_hang_up(writer: asyncio.StreamWriter, n: int) -> bool:
        await ok(writer, n)
        return False  # closes without saying so: the client's idle socket goes stale

    raw, url = await serve(answer_then_hang_up)
    async with client() as c:
        for _ in range(3):
            assert (await c.post(url, content=b"{}")).status_code == 200
    assert raw.requests == 3 and raw.connections == 3


async def test_chunked_and_oversized_answers(serve) -> None:  # type: ignore[no-untyped-def]
    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        if n == 1:
            writer.write(b"HTTP/1.1 500 Oops\r\ntransfer-encoding: chunked\r\n\r\n4\r\nfail\r\n3\r\ned!\r\n0\r\n\r\n")
        else:
            body = b"x" * (MAX_BODY_BYTES * 3)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
        await writer.drain()
        return True

    raw, url = await serve(answer)
    async with client() as c:
        r = await c.post(url, content=b"{}")
        assert (r.status_code, r.content) == (500, b"failed!")
        r = await c.post(url, content=b"{}")
        assert r.status_code == 200 and len(r.content) == MAX_BODY_BYTES


async def test_a_silent_endpoint_times_out_and_is_retried(serve) -> None:  # type: ignore[no-untyped-def]
    async def never(writer: asyncio.StreamWriter, n: int) -> bool:
        await asyncio.sleep(30)
        return False

    _, url = await serve(never)
    deliverer = Deliverer(signer=Signer([]), guard=SsrfGuard(allow_private=True), concurrency=4, per_endpoint=2,
                          connect_timeout_s=1, timeout_s=0.5, retry_after_cap_s=60)
    try:
        attempt = await deliverer.deliver(url, "job-t", b"{}")
    finally:
        await deliverer.aclose()
    assert attempt.kind is Kind.RETRY and attempt.error.startswith("timeout after 0.5s")


async def test_nothing_listening_is_a_connect_error() -> None:
    from streams.embedded import free_port

    deliverer = Deliverer(signer=Signer([]), guard=SsrfGuard(allow_private=True), concurrency=4, per_endpoint=2,
                          connect_timeout_s=1, timeout_s=2, retry_after_cap_s=60)
    try:
        attempt = await deliverer.deliver(f"http://127.0.0.1:{free_port()}/x", "job-c", b"{}")
    finally:
        await deliverer.aclose()
    assert attempt.kind is Kind.RETRY and attempt.error.startswith("ConnectError")


async def parse(raw: bytes) -> Answer:
    reader = asyncio.StreamReader()
    reader.feed_data(raw)
    reader.feed_eof()
    return await read_response(reader, max_body=100)


async def test_http1_framing() -> None:
    a = await parse(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 202 Accepted\r\ncontent-length: 3\r\n\r\nyes")
    assert (a.status, a.reason, a.body, a.reusable) == (202, "Accepted", b"yes", True)
    a = await parse(b"HTTP/1.1 200 OK\r\nConnection: close\r\ncontent-length: 0\r\n\r\n")
    assert a.reusable is False
    a = await parse(b"HTTP/1.0 500 Bad\r\n\r\nuntil the end")
    assert (a.status, a.body, a.reusable) == (500, b"until the end", False)
    a = await parse(b"HTTP/1.1 204 No Content\r\n\r\n")
    assert (a.body, a.reusable) == (b"", True)
    a = await parse(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + b"80\r\n" + b"z" * 128 + b"\r\n0\r\n\r\n")
    assert (len(a.body), a.reusable) == (100, False)
    for bad in (b"HTTP/2 200 OK\r\n\r\n", b"HTTP/1.1 2000 OK\r\n\r\n", b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
                b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nx"):
        with pytest.raises(ProtocolError):
            await parse(bad)
    with pytest.raises(asyncio.IncompleteReadError):
        await parse(b"")


def test_request_encoding_refuses_header_injection() -> None:
    assert encode_request("POST", b"/h?a=1", [(b"host", b"x")], b"{}") == b"POST /h?a=1 HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}"
    with pytest.raises(ProtocolError):
        encode_request("POST", b"/h", [(b"x-evil", b"a\r\nhost: other")], b"")
    with pytest.raises(ProtocolError):
        encode_request("POST", b"/h HTTP/1.1\r\nx: y", [], b"")


def _self_signed(tmp: Path, name: str) -> tuple[Path, Path]:
    """A certificate for DNS name ``name`` only (no IP), and its key, written as PEM files."""
    crypto = pytest.importorskip("cryptography")
    del crypto
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp / "cert.pem", tmp / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


async def test_https_is_pinned_to_the_checked_address_and_verified_against_the_host_name(tmp_path: Path) -> None:
    # Given a TLS endpoint on 127.0.0.1 whose certificate names only "localhost"
    cert, key = _self_signed(tmp_path, "localhost")
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    raw = RawServer(ok)
    server = await asyncio.start_server(raw.handle, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    client_ctx = ssl.create_default_context(cafile=str(cert))
    transport = LeanTransport(SsrfGuard(allow_private=True), ssl_context=client_ctx)
    try:
        async with httpx.AsyncClient(transport=transport, timeout=5) as c:
            # When it is called by name, the socket goes to the resolved address and TLS checks the name
            r = await c.post(f"https://localhost:{port}/hook", content=b"{}")
            assert (r.status_code, r.content) == (200, b"ok")
            # Then called by IP, the certificate does not match and nothing is sent
            with pytest.raises(httpx.ConnectError, match="certificate|CERTIFICATE|match"):
                await c.post(f"https://127.0.0.1:{port}/hook", content=b"{}")
        assert raw.requests == 1
    finally:
        server.close()
