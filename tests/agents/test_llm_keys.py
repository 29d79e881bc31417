"""The key pool against a loopback endpoint: each usable key in turn, and a bounded wait for a concurrency slot."""

from __future__ import annotations

import asyncio
import re

import pytest

from agents.llm import ChatResult, LLMClient, LLMRequestError, LLMUnavailable
from tests.agents.test_llm_hostile import HELLO, client_for, ok
from tests.hostile import HostilePeer, Start, response, started_peers

peer = pytest.fixture(started_peers, name="peer")
KEYS = ["sk-turn-alpha-000001", "sk-turn-bravo-000002", "sk-turn-charlie-0003"]
LABELS = {key: f"key#{i}" for i, key in enumerate(KEYS, start=1)}
UNAUTHORIZED = response(401, b'{"error": "invalid api key"}', reason="Unauthorized")


def key_of(head: bytes) -> str:
    found = re.search(rb"authorization: Bearer (\S+)", head, re.IGNORECASE)
    assert found is not None, head
    return LABELS[found.group(1).decode()]


async def key1_refused(peer: Start, refusal: bytes) -> HostilePeer:
    """An endpoint that answers ``refusal`` to every request sent with key#1 and completes the others."""
    started: list[HostilePeer] = []

    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        writer.write(refusal if key_of(started[0].heads[n - 1]) == "key#1" else ok("fine"))
        await writer.drain()
        return True

    started.append(await peer(answer))
    return started[0]


async def always(peer: Start, reply: bytes) -> HostilePeer:
    """An endpoint that answers ``reply`` to every request."""
    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        writer.write(reply)
        await writer.drain()
        return True

    return await peer(answer)


async def all_fine(client: LLMClient, calls: int) -> None:
    """Make ``calls`` calls one after another, each answered "fine", then close the client."""
    try:
        for _ in range(calls):
            assert (await client.chat(HELLO)).content == "fine"
    finally:
        await client.aclose()


async def test_the_key_after_a_cooling_one_gets_no_double_share(peer: Start) -> None:
    # Given three keys, and an endpoint that benches key#1 for 60 s (429) and answers the others
    p = await key1_refused(peer, response(429, b"{}", headers="retry-after: 60\r\n"))
    # When seven calls are made one after another
    await all_fine(client_for(p.url, api_keys=",".join(KEYS), max_backoff_s=60.0), 7)
    # Then key#1 was tried once, and the two usable keys took turns: neither is handed out twice in a row
    sent = [key_of(head) for head in p.heads]
    assert sent == ["key#1", "key#2", "key#3", "key#2", "key#3", "key#2", "key#3", "key#2"], sent


async def test_a_call_waiting_for_a_concurrency_slot_gives_up_at_its_budget(peer: Start) -> None:
    # Given one key with one request in flight at a time, a 0.5 s budget per call, a 30 s timeout per try,
    # and an endpoint that holds the first request until the test lets it go
    received, release = asyncio.Event(), asyncio.Event()

    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        if n == 1:
            received.set()
            await release.wait()
        writer.write(ok("fine"))
        await writer.drain()
        return True

    p = await peer(answer)
    client = client_for(p.url, max_concurrency=1, retry_budget_s=0.5, timeout_s=30.0)
    try:
        first = asyncio.create_task(client.chat(HELLO))
        await asyncio.wait_for(received.wait(), 10)
        # When a second call needs that key's only slot
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            with pytest.raises(LLMUnavailable) as caught:
                await asyncio.wait_for(client.chat(HELLO), 10)
        except TimeoutError:
            pytest.fail("the second call still waited for a slot 10 s past its 0.5 s budget")
        waited = loop.time() - started
        release.set()
        assert (await asyncio.wait_for(first, 10)).content == "fine"
    finally:
        release.set()
        await client.aclose()
    # Then it gave up at its budget, sent nothing, and says why
    assert 0.4 <= waited < 5.0, waited
    assert p.requests == 1
    message = str(caught.value)
    assert "gave up after 0 attempt(s)" in message and "every usable API key had its 1 request(s) in flight (STREAMCREW_LLM_MAX_CONCURRENCY)" in message, message


async def test_a_call_waiting_for_a_slot_takes_the_first_key_that_frees_one(peer: Start) -> None:
    # Given two keys with one request in flight each, and an endpoint that holds key#1's request (a long call)
    # and key#2's request (a short one) until the test lets each go, and answers any later request at once
    held = {"key#1": (asyncio.Event(), asyncio.Event()), "key#2": (asyncio.Event(), asyncio.Event())}
    started: list[HostilePeer] = []

    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        if n <= 2:
            received, release = held[key_of(started[0].heads[n - 1])]
            received.set()
            await release.wait()
        writer.write(ok(f"answer-{n}"))
        await writer.drain()
        return True

    started.append(await peer(answer))
    p = started[0]
    client = client_for(p.url, api_keys=",".join(KEYS[:2]), max_concurrency=1, retry_budget_s=30.0, timeout_s=30.0)
    calls: list[asyncio.Task[ChatResult]] = []
    try:
        calls.append(asyncio.create_task(client.chat(HELLO)))
        await asyncio.wait_for(held["key#1"][0].wait(), 10)
        calls.append(asyncio.create_task(client.chat(HELLO)))
        await asyncio.wait_for(held["key#2"][0].wait(), 10)
        # When a third call queues for a slot (its task runs before key#2's answer can arrive), then key#2's call ends
        calls.append(asyncio.create_task(client.chat(HELLO)))
        held["key#2"][1].set()
        # Then the third call goes out on key#2 and is answered while key#1's long call is still held
        # (before, it queued for key#1's slot only: next in turn, and busy until its long call ended)
        try:
            third = await asyncio.wait_for(asyncio.shield(calls[2]), 10)
        except TimeoutError:
            pytest.fail(f"the third call still waited 10 s for key#1's slot while key#2 was free; sent: {[key_of(h) for h in p.heads]}")
        assert not calls[0].done()
        assert third.content == "answer-3"
        assert [key_of(h) for h in p.heads] == ["key#1", "key#2", "key#2"]
        held["key#1"][1].set()
        assert (await asyncio.wait_for(calls[0], 10)).content == "answer-1"
        # and the third call's other queued wait left no slot taken
        assert not any(key.slots.locked() for key in client.keys.keys)
    finally:
        for received, release in held.values():
            release.set()
        await asyncio.gather(*calls, return_exceptions=True)
        await client.aclose()


async def test_a_key_the_provider_refuses_as_unauthorized_is_benched_and_the_call_goes_on(peer: Start) -> None:
    # Given three keys, and an endpoint that answers 401 to key#1 (revoked) and completes with the others
    p = await key1_refused(peer, UNAUTHORIZED)
    # When six calls are made one after another (before, the first failed outright: 'provider refused', and
    # every third call after it too, each failing its job's attempt)
    await all_fine(client_for(p.url, api_keys=",".join(KEYS)), 6)
    # Then key#1 was sent once, and the calls went on with the two keys left
    sent = [key_of(head) for head in p.heads]
    assert sent.count("key#1") == 1 and len(sent) == 7, sent


async def test_one_key_refused_as_unauthorized_still_fails_the_call_at_once(peer: Start) -> None:
    # Given a single key the endpoint answers 401 (nothing else to try)
    p = await always(peer, UNAUTHORIZED)
    client = client_for(p.url)
    try:
        # When a call is made; Then it fails at once, naming the 401, after one request
        with pytest.raises(LLMRequestError, match="401"):
            await client.chat(HELLO)
    finally:
        await client.aclose()
    assert len(p.heads) == 1
