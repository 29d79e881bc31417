"""The notifier's HTTP client (aiohttp, pinned to checked addresses): keep-alive, stale sockets, bodies, timeouts, TLS."""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
from pathlib import Path

import pytest

from consumers.notifier.delivery import MAX_RESPONSE_BYTES, Deliverer, Kind, redirect_target
from consumers.notifier.signing import Signer
from consumers.notifier.ssrf import SsrfGuard
from tests.hostile import HostilePeer, Start, response, started_peers

serve = pytest.fixture(started_peers, name="serve")


def deliverer(timeout_s: float = 2.0, ssl_context: ssl.SSLContext | None = None) -> Deliverer:
    return Deliverer(signer=Signer([]), guard=SsrfGuard(allow_private=True), concurrency=4, per_endpoint=2,
                     connect_timeout_s=1, timeout_s=timeout_s, retry_after_cap_s=60, ssl_context=ssl_context)


async def ok(writer: asyncio.StreamWriter, n: int) -> bool:
    writer.write(response(200))
    await writer.drain()
    return True


async def test_connections_are_kept_alive_and_reused(serve: Start) -> None:
    p = await serve(ok)
    d = deliverer()
    try:
        for i in range(5):
            assert (await d.deliver(p.url + "/hook", f"j{i}", b"{}")).kind is Kind.DELIVERED
    finally:
        await d.aclose()
    assert (p.connections, p.requests) == (1, 5)


async def test_a_connection_the_server_closed_while_idle_is_replaced(serve: Start) -> None:
    closed = asyncio.Event()

    async def answer_then_hang_up(writer: asyncio.StreamWriter, n: int) -> bool:
        await ok(writer, n)
        writer.close()
        await writer.wait_closed()
        closed.set()
        return False  # closes without saying so: the client's idle socket goes stale

    p = await serve(answer_then_hang_up)
    d = deliverer()
    try:
        for i in range(3):
            closed.clear()
            assert (await d.deliver(p.url + "/hook", f"j{i}", b"{}")).kind is Kind.DELIVERED
            await asyncio.wait_for(closed.wait(), 5)
            await asyncio.sleep(0.02)  # a loop turn or two for the client to see the FIN
    finally:
        await d.aclose()
    assert p.requests == 3 and p.connections == 3


async def test_chunked_and_oversized_answers(serve: Start) -> None:
    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        if n == 1:
            writer.write(b"HTTP/1.1 500 Oops\r\ntransfer-encoding: chunked\r\n\r\n4\r\nfail\r\n3\r\ned!\r\n0\r\n\r\n")
        else:
            writer.write(response(200, b"x" * (MAX_RESPONSE_BYTES * 3)))
        await writer.drain()
        return True

    p = await serve(answer)
    d = deliverer()
    try:
        first = await d.deliver(p.url + "/hook", "j1", b"{}")
        assert (first.kind, first.status, first.error) == (Kind.RETRY, 500, "HTTP 500: failed!")
        second = await d.deliver(p.url + "/hook", "j2", b"{}")
        assert (second.kind, second.status) == (Kind.DELIVERED, 200)
    finally:
        await d.aclose()


async def test_a_silent_endpoint_times_out_and_is_retried(serve: Start) -> None:
    async def never(writer: asyncio.StreamWriter, n: int) -> bool:
        await asyncio.sleep(30)
        return False

    p = await serve(never)
    d = deliverer(timeout_s=0.5)
    try:
        attempt = await d.deliver(p.url + "/hook", "job-t", b"{}")
    finally:
        await d.aclose()
    assert attempt.kind is Kind.RETRY and attempt.error.startswith("timeout after 0.5s")


async def test_nothing_listening_is_a_connect_error(refusing_port: int) -> None:
    d = deliverer()
    port = refusing_port
    try:
        attempt = await d.deliver(f"http://user:pw@127.0.0.1:{port}/x?token=q", "job-c", b"{}")
    finally:
        await d.aclose()
    assert attempt.kind is Kind.RETRY and attempt.error.startswith("ConnectError"), attempt
    assert f"127.0.0.1:{port}" in attempt.error and "pw" not in attempt.error and "token" not in attempt.error


async def test_a_reset_connection_is_named_in_the_error_without_the_url(serve: Start) -> None:
    # Given a receiver that reads the request, then resets the connection (RST, no answer)
    async def reset(writer: asyncio.StreamWriter, n: int) -> bool:
        writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()
        return False

    p = await serve(reset)
    d = deliverer()
    try:
        # When a delivery to a URL with credentials and a token goes there
        attempt = await d.deliver(f"http://user:pw@127.0.0.1:{p.port}/x?token=q", "job-r", b"{}")
    finally:
        await d.aclose()
    # Then the attempt failed, and its error (what the dead letter keeps) says the connection was reset,
    # from the errno alone: never aiohttp's own text, which may quote the URL
    assert attempt.kind is Kind.RETRY and attempt.status is None, attempt
    assert attempt.error == "ClientOSError: Connection reset by peer", attempt
    assert "pw" not in attempt.error and "token" not in attempt.error


async def test_an_id_or_url_that_would_break_the_framing_never_injects_a_header(serve: Start) -> None:
    p = await serve(ok)
    d = deliverer()
    try:
        attempt = await d.deliver(p.url + "/hook", "job\r\nx-evil: 1", b"{}")
        assert attempt.kind is Kind.DELIVERED
        bad_url = await d.deliver(p.url + "/hook\r\nx-evil: 1", "job-2", b"{}")
    finally:
        await d.aclose()
    assert bad_url.kind in (Kind.DELIVERED, Kind.REFUSED)
    assert p.requests >= 1 and not any(b"\r\nx-evil" in head.lower() for head in p.heads), p.heads


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
    p = await HostilePeer(ok).start(ssl=server_ctx)
    d = deliverer(ssl_context=ssl.create_default_context(cafile=str(cert)))
    try:
        # When it is called by name, the socket goes to the resolved, checked address and TLS checks the name
        by_name = await d.deliver(f"https://localhost:{p.port}/hook", "j1", b"{}")
        # Then called by IP, the certificate does not match and nothing is sent
        by_ip = await d.deliver(f"https://127.0.0.1:{p.port}/hook", "j2", b"{}")
    finally:
        await d.aclose()
        await p.stop()
    assert (by_name.kind, by_name.status) == (Kind.DELIVERED, 200)
    assert by_ip.kind is Kind.RETRY and "certificate" in by_ip.error.lower(), by_ip
    assert p.requests == 1


async def test_a_name_is_connected_only_to_addresses_the_guard_approved(serve: Start) -> None:
    # Given a guard that allows 127.0.0.1 but refuses every other address (::1 included)
    p = await serve(ok)
    d = Deliverer(signer=Signer([]), guard=SsrfGuard(allow_list=["127.0.0.1"]), concurrency=4, per_endpoint=2,
                  connect_timeout_s=1, timeout_s=2, retry_after_cap_s=60)
    try:
        # When "localhost" (127.0.0.1 and ::1) is the target, it is refused as a whole
        attempt = await d.deliver(f"http://localhost:{p.port}/hook", "j1", b"{}")
        # And the literal allowed address is delivered
        literal = await d.deliver(f"http://127.0.0.1:{p.port}/hook", "j2", b"{}")
    finally:
        await d.aclose()
    assert attempt.kind is Kind.REFUSED and "::1" in attempt.error, attempt
    assert literal.kind is Kind.DELIVERED and p.requests == 1


async def test_a_redirect_is_not_followed_and_says_where_it_pointed(serve: Start) -> None:
    async def moved(writer: asyncio.StreamWriter, n: int) -> bool:
        where = "https://hooks.example/v2/orders?token=s3cret" if n == 1 else "/v3/orders?sig=abc"
        writer.write(response(301 if n == 1 else 307, b"moved", headers=f"location: {where}\r\n"))
        await writer.drain()
        return True

    p = await serve(moved)
    d = deliverer()
    try:
        first = await d.deliver(p.url + "/hook?key=k", "j1", b"{}")
        second = await d.deliver(p.url + "/hook?key=k", "j2", b"{}")
    finally:
        await d.aclose()
    assert p.requests == 2  # neither redirect was followed
    assert (first.kind, first.status) == (Kind.RETRY, 301)
    assert first.error == "HTTP 301: redirect to https://hooks.example/v2/orders not followed (give the job that webhook URL)"
    assert second.error == f"HTTP 307: redirect to {p.url}/v3/orders not followed (give the job that webhook URL)"
    assert "s3cret" not in first.error + second.error and "sig=" not in second.error
    assert redirect_target("http://a.example/h", "/" + "x" * 10_000) == "http://a.example/" + "x" * 183 + "..."
    assert redirect_target("http://a.example/h", "http://[::1") == "(unparseable URL)"
