"""The LLM client against loopback endpoints: how long it waits between tries, and which answers it takes.

A provider's wait headers are untrusted: a negative ``retry-after-ms`` must not
override a good ``Retry-After``, and ``Retry-After: 0`` (or a past date) must
not make the client resend at once, ``max_retries`` times. Any 2xx with a
well-formed body is an answer, not a refusal.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Iterator

import orjson
import pytest

from agents.llm import LLMUnavailable
from agents.usage import UsageLedger
from tests.agents.test_llm_hostile import client_for, completion, failed_call
from tests.hostile import Start, response, started_peers

peer = pytest.fixture(started_peers, name="peer")


def stamped(first: bytes, then: bytes, times: list[float]) -> object:
    """An answer script: ``first`` to the first request, ``then`` to the rest, noting when each arrived."""
    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        times.append(time.monotonic())
        writer.write(first if n == 1 else then)
        await writer.drain()
        return True

    return answer


@pytest.mark.parametrize("status", [429, 503])
@pytest.mark.parametrize("ms", ["-1000", "-1", "inf", "soon"])
async def test_an_unusable_retry_after_ms_leaves_retry_after_in_charge(peer: Start, status: int, ms: str) -> None:
    # Given one key, and a first answer whose retry-after-ms is negative or garbled beside a valid Retry-After: 0.5
    times: list[float] = []
    refusal = response(status, b"{}", headers=f"retry-after-ms: {ms}\r\nretry-after: 0.5\r\n")
    p = await peer(stamped(refusal, response(200, completion("fine")), times))  # type: ignore[arg-type]
    client = client_for(p.url, backoff_s=0.01, max_backoff_s=5.0)
    try:
        # When a call is made
        result = await client.chat([{"role": "user", "content": "hi"}])
    finally:
        await client.aclose()
    # Then the retry waited for Retry-After, not for the bad retry-after-ms
    assert result.content == "fine"
    assert times[1] - times[0] >= 0.45, f"retried after {times[1] - times[0]:.3f}s; Retry-After said 0.5"


@pytest.mark.parametrize("status", [429, 503])
@pytest.mark.parametrize("retry_after", ["retry-after: 0", "retry-after: Wed, 21 Oct 2015 07:28:00 GMT", "retry-after-ms: 0"],
                         ids=["zero", "past-date", "zero-ms"])
async def test_a_zero_or_past_retry_after_never_undercuts_the_backoff(peer: Start, status: int, retry_after: str) -> None:
    # Given one key and an endpoint that always refuses with a wait of nothing
    times: list[float] = []
    refusal = response(status, b"{}", headers=f"{retry_after}\r\n")
    p = await peer(stamped(refusal, refusal, times))  # type: ignore[arg-type]
    backoff_s = 0.1
    client = client_for(p.url, backoff_s=backoff_s, max_backoff_s=5.0, max_retries=3)
    # When a call is made
    caught = await failed_call(client, LLMUnavailable)
    # Then every retry waited at least its own backoff (jitter draws 0.5-1.5 of it): 0.1, 0.2, 0.4 s
    assert p.requests == 4, caught.value
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    for n, gap in enumerate(gaps, start=1):
        floor = 0.5 * backoff_s * 2 ** (n - 1)
        assert gap >= floor * 0.95, f"retry {n} went after {gap:.3f}s, under the backoff floor of {floor:.3f}s: {gaps}"


@pytest.mark.parametrize("status", [201, 202, 203])
async def test_a_2xx_with_a_completion_is_an_answer(peer: Start, ledger: UsageLedger, status: int) -> None:
    # Given an endpoint that answers a valid completion with a 2xx other than 200
    times: list[float] = []
    answer = response(status, completion("created"), headers="content-type: application/json\r\n")
    p = await peer(stamped(answer, answer, times))  # type: ignore[arg-type]
    client = client_for(p.url)
    try:
        # When a call is made
        result = await client.chat([{"role": "user", "content": "hi"}])
    finally:
        await client.aclose()
    # Then it is read as the answer, once, and booked
    assert result.content == "created"
    assert p.requests == 1 and ledger.calls == 1


@pytest.mark.parametrize(("status", "body", "says"), [
    (201, orjson.dumps({"id": "job-1", "status": "queued"}), "HTTP 201 with a malformed chat completion"),
    (202, b"accepted", "HTTP 202 with a body that is not JSON"),
    (204, b"", "HTTP 204 with a body that is not JSON"),
], ids=["201-wrong-shape", "202-not-json", "204-empty"])
async def test_a_2xx_without_a_completion_is_a_clear_error(peer: Start, ledger: UsageLedger, status: int, body: bytes, says: str) -> None:
    # Given an endpoint that answers a 2xx whose body is no completion
    times: list[float] = []
    answer = response(status, body) if status != 204 else f"HTTP/1.1 {status} X\r\n\r\n".encode()
    p = await peer(stamped(answer, answer, times))  # type: ignore[arg-type]
    client = client_for(p.url, max_retries=1)
    # When a call is made
    caught = await failed_call(client, LLMUnavailable)
    # Then each try failed like a 502 (retried), the error names the status and what was wrong, nothing was booked
    assert p.requests == 2
    assert says in str(caught.value), str(caught.value)
    assert ledger.calls == 0


@pytest.fixture
def unanswered_port() -> Iterator[int]:
    """A loopback listener whose accept queue is full: the kernel drops further SYNs, so a connect hangs, as to a
    host that drops packets."""
    with socket.socket() as listener, contextlib.ExitStack() as fillers:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = int(listener.getsockname()[1])
        for _ in range(3):
            filler = fillers.enter_context(socket.socket())
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(("127.0.0.1", port))
        yield port


async def test_a_connect_timeout_names_the_connect_timeout(unanswered_port: int) -> None:
    # Given an endpoint that never completes a connection, a 0.3 s connect timeout and a 5 s timeout per try
    client = client_for(f"http://127.0.0.1:{unanswered_port}", connect_timeout_s=0.3, timeout_s=5.0, max_retries=0)
    started = time.monotonic()
    # When a call is made
    caught = await failed_call(client, LLMUnavailable)
    # Then it gave up after the connect timeout, and the error says which timeout it was, not the 5 s one
    assert time.monotonic() - started < 4.0
    assert f"connect timeout after 0.3s at 127.0.0.1:{unanswered_port}" in str(caught.value), str(caught.value)
