"""Hostile webhook receivers on loopback against the real delivery client (issue 10, defects 4 and 10)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from consumers.notifier.delivery import Deliverer, Kind
from consumers.notifier.signing import Signer
from consumers.notifier.ssrf import SsrfGuard
from tests.hostile import Start, response, started_peers

peer = pytest.fixture(started_peers, name="peer")


@pytest.fixture
async def deliverer() -> AsyncIterator[Deliverer]:
    d = Deliverer(signer=Signer([]), guard=SsrfGuard(allow_private=True), concurrency=50, per_endpoint=20,
                  connect_timeout_s=2, timeout_s=3, retry_after_cap_s=60)
    yield d
    await d.aclose()


async def test_a_second_answer_to_one_request_is_never_credited_to_the_next_delivery(peer: Start, deliverer: Deliverer) -> None:
    # Given a receiver that answers its first request with two 200s, and every later request with 500
    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        writer.write(response(200) + response(200) if n == 1 else response(500, b"no"))
        await writer.drain()
        return True

    p = await peer(answer)
    # When two deliveries go to it one after the other
    first = await deliverer.deliver(p.url + "/hook", "job-1", b"{}")
    second = await deliverer.deliver(p.url + "/hook", "job-2", b"{}")
    # Then the second is the 500 the receiver gave it, not the stray 200
    assert first.kind is Kind.DELIVERED
    assert (second.kind, second.status) == (Kind.RETRY, 500), second
    assert p.requests == 2


async def test_a_request_the_receiver_read_is_not_sent_again_in_the_same_attempt(peer: Start, deliverer: Deliverer) -> None:
    # Given a receiver that kept ten connections alive, then starts reading requests and hanging up without a word
    hang_up = asyncio.Event()

    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        if hang_up.is_set():
            return False
        await asyncio.sleep(0.05)  # hold the connection so the warm-up opens several
        writer.write(response(200))
        await writer.drain()
        return True

    p = await peer(answer)
    # (20: its connections grow with its answers, 1, 2, 4, 8, so 10 at once would open only 4)
    warm = await asyncio.gather(*(deliverer.deliver(p.url + "/hook", f"warm-{i}", b"{}") for i in range(20)))
    assert all(a.kind is Kind.DELIVERED for a in warm) and p.connections >= 5
    hang_up.set()
    before = p.requests
    # When one delivery is attempted
    attempt = await deliverer.deliver(p.url + "/hook", "job-once", b'{"n": 1}')
    # Then the event was POSTed once, and the attempt counts as failed (it is retried later, with backoff)
    assert p.requests - before == 1, f"one attempt POSTed the event {p.requests - before} times"
    assert attempt.kind is Kind.RETRY and attempt.status is None and attempt.made


async def test_status_lines_below_100_are_a_failed_attempt_not_an_interim_answer(peer: Start, deliverer: Deliverer) -> None:
    # Given a receiver that answers "050" then a 200 on the same request
    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        writer.write(b"HTTP/1.1 050 Odd\r\n\r\n" + response(200))
        await writer.drain()
        return True

    p = await peer(answer)
    # When a delivery goes to it
    attempt = await deliverer.deliver(p.url + "/hook", "job-0xx", b"{}")
    # Then it is not delivered: the status line is a protocol error, the attempt failed
    assert attempt.kind is Kind.RETRY and attempt.status is None, attempt


async def test_a_stray_answer_arriving_on_an_idle_connection_is_never_credited_to_the_next_delivery(
        peer: Start, deliverer: Deliverer) -> None:
    # Given a receiver that answers its first request, then sends a second 200 on the idle connection
    stray_sent = asyncio.Event()

    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        if n == 1:
            writer.write(response(200))
            await writer.drain()
            await asyncio.sleep(0.05)  # the client has read its answer and pooled the connection by now
            writer.write(response(200))
            await writer.drain()
            stray_sent.set()
        else:
            writer.write(response(500, b"no"))
            await writer.drain()
        return True

    p = await peer(answer)
    assert (await deliverer.deliver(p.url + "/hook", "job-1", b"{}")).kind is Kind.DELIVERED
    await asyncio.wait_for(stray_sent.wait(), 5)
    await asyncio.sleep(0.02)  # one loop turn or two for the client's socket to take the stray bytes in
    # When the next delivery goes out
    second = await deliverer.deliver(p.url + "/hook", "job-2", b"{}")
    # Then it gets its own answer (500), on a fresh connection
    assert (second.kind, second.status) == (Kind.RETRY, 500), second
    assert p.connections == 2


async def test_a_2xx_whose_body_stalls_or_breaks_is_delivered_and_other_statuses_keep_theirs(peer: Start) -> None:
    # Given a receiver that sends a status line and headers, then stalls on the body or sends a broken chunk
    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        status, framing = {1: (200, "content-length: 100"), 2: (202, "transfer-encoding: chunked"),
                           3: (503, "content-length: 100")}[n]
        writer.write(f"HTTP/1.1 {status} X\r\n{framing}\r\n\r\n".encode())
        await writer.drain()
        if n == 2:
            await asyncio.sleep(0.05)  # the status is read, then the body breaks
            writer.write(b"zz\r\n")
            await writer.drain()
        await asyncio.sleep(5)
        return False

    p = await peer(answer)
    d = Deliverer(signer=Signer([]), guard=SsrfGuard(allow_private=True), concurrency=4, per_endpoint=1,
                  connect_timeout_s=1, timeout_s=0.5, retry_after_cap_s=60)
    try:
        # When three deliveries go to it, one after the other
        stalled, broken, failed = [await d.deliver(p.url + "/hook", f"job-{i}", b"{}") for i in range(3)]
    finally:
        await d.aclose()
    # Then a 2xx is delivered whatever its body does (contract §7: any 2xx; before, a timeout: retried, sent again)
    assert (stalled.kind, stalled.status) == (Kind.DELIVERED, 200), stalled
    assert (broken.kind, broken.status) == (Kind.DELIVERED, 202), broken
    # And a 503 whose body stalls is retried with its status kept (a dead letter's last_status), saying why
    assert (failed.kind, failed.status) == (Kind.RETRY, 503), failed
    assert failed.error.startswith("HTTP 503 (its body timed out after"), failed
    assert p.requests == 3


INTERIM = b"HTTP/1.1 102 Processing\r\n\r\n"


async def test_more_than_ten_interim_answers_fail_the_attempt(peer: Start, deliverer: Deliverer) -> None:
    # Given a receiver that puts 10 interim (1xx) answers before its 200 on its first request, 11 on its second
    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        writer.write(INTERIM * (9 + n) + response(200))
        await writer.drain()
        return True

    p = await peer(answer)
    # When two deliveries go to it
    ten = await deliverer.deliver(p.url + "/hook", "job-10", b"{}")
    eleven = await deliverer.deliver(p.url + "/hook", "job-11", b"{}")
    # Then ten are skipped, as HTTP wants; the eleventh fails the attempt as a protocol error (before, the 200 after
    # them was taken: any number of them was skipped), and the connection is not reused
    assert (ten.kind, ten.status) == (Kind.DELIVERED, 200), ten
    assert (eleven.kind, eleven.status) == (Kind.RETRY, None), eleven
    assert eleven.error == "protocol error: more than 10 interim (1xx) answers before the status", eleven
    assert (await deliverer.deliver(p.url + "/hook", "job-12", b"{}")).kind is Kind.RETRY
    assert p.connections == 2


async def test_a_receiver_streaming_interim_answers_is_cut_off(peer: Start, deliverer: Deliverer) -> None:
    # Given a receiver that streams interim answers as fast as the notifier reads them (up to 100 MB), never a status
    block = INTERIM * 1000
    sent = 0
    cut_off = asyncio.Event()

    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        nonlocal sent
        try:
            for _ in range(100 * 2**20 // len(block)):
                writer.write(block)
                await writer.drain()
                sent += len(block)
        except ConnectionError:
            cut_off.set()
        return False

    p = await peer(answer)
    # When a delivery goes to it
    attempt = await deliverer.deliver(p.url + "/hook", "job-flood", b"{}")
    # Then the attempt fails on the eleventh, not at its deadline (3 s) after reading all it could, and the notifier
    # closes the connection: the receiver's writes fail before it got far (what socket buffers hold)
    assert attempt.kind is Kind.RETRY and "interim" in attempt.error, attempt
    try:
        await asyncio.wait_for(cut_off.wait(), 5)
    except TimeoutError:
        pytest.fail(f"the receiver was still writing: {sent:,} bytes of interim answers sent")
    assert sent < 16 * 2**20, f"{sent:,} bytes of interim answers sent before the connection was closed"
