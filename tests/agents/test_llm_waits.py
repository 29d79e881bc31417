"""The LLM client against loopback endpoints: how long it waits between tries, and which answers it takes.

A provider's wait headers are untrusted: a negative ``retry-after-ms`` must not
override a good ``Retry-After``, and ``Retry-After: 0`` (or a past date) must
not make the client resend at once, ``max_retries`` times. Any 2xx with a
well-formed body is an answer, not a refusal.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.agents.test_llm_hostile import client_for, completion
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
