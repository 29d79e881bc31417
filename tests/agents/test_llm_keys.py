"""The key pool against a loopback endpoint: each usable key in turn, and a bounded wait for a concurrency slot."""

from __future__ import annotations

import asyncio
import re

import pytest

from tests.agents.test_llm_hostile import HELLO, client_for, ok
from tests.hostile import HostilePeer, Start, response, started_peers

peer = pytest.fixture(started_peers, name="peer")
KEYS = ["sk-turn-alpha-000001", "sk-turn-bravo-000002", "sk-turn-charlie-0003"]
LABELS = {key: f"key#{i}" for i, key in enumerate(KEYS, start=1)}


def key_of(head: bytes) -> str:
    found = re.search(rb"authorization: Bearer (\S+)", head, re.IGNORECASE)
    assert found is not None, head
    return LABELS[found.group(1).decode()]


async def test_the_key_after_a_cooling_one_gets_no_double_share(peer: Start) -> None:
    # Given three keys, and an endpoint that benches key#1 for 60 s (429) and answers the others
    started: list[HostilePeer] = []

    async def answer(writer: asyncio.StreamWriter, n: int) -> bool:
        benched = key_of(started[0].heads[n - 1]) == "key#1"
        writer.write(response(429, b"{}", headers="retry-after: 60\r\n") if benched else ok("fine"))
        await writer.drain()
        return True

    started.append(await peer(answer))
    client = client_for(started[0].url, api_keys=",".join(KEYS), max_backoff_s=60.0)
    try:
        # When seven calls are made one after another
        for _ in range(7):
            assert (await client.chat(HELLO)).content == "fine"
    finally:
        await client.aclose()
    # Then key#1 was tried once, and the two usable keys took turns: neither is handed out twice in a row
    sent = [key_of(head) for head in started[0].heads]
    assert sent == ["key#1", "key#2", "key#3", "key#2", "key#3", "key#2", "key#3", "key#2"], sent
