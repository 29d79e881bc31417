"""Open event streams per caller are capped (STREAMCREW_MAX_EVENT_STREAMS_PER_KEY): each one polls Redis, so one
caller holding thousands would slow every other caller. Over the cap: 429 with Retry-After; a slot frees when its
stream ends or its client hangs up."""

from __future__ import annotations

from contextlib import AsyncExitStack

import httpx

from streams.keys import Keys
from tests.consumers.gateway.support import GatewayFactory
from tests.support import wait_until

EVENTS = "/jobs/held/events"


async def open_stream(stack: AsyncExitStack, client: httpx.AsyncClient) -> httpx.Response:
    """A stream kept open until ``stack`` closes (its status and headers have arrived); a refusal's body is read."""
    response = await stack.enter_async_context(client.stream("GET", EVENTS))
    if response.status_code != 200:
        await response.aread()
    return response


async def all_open(client: httpx.AsyncClient, n: int) -> bool:
    """Whether ``n`` streams open at once now; they are closed again (the client hangs up)."""
    async with AsyncExitStack() as stack:
        return [(await open_stream(stack, client)).status_code for _ in range(n)] == [200] * n


async def open_streams_metric(client: httpx.AsyncClient) -> float:
    """The gateway's streamcrew_http_event_streams, read off its /metrics."""
    text = (await client.get("/metrics")).text
    return float(next(line.split()[1] for line in text.splitlines() if line.startswith("streamcrew_http_event_streams ")))


async def test_a_key_over_its_stream_cap_is_429_until_one_closes(gateways: GatewayFactory, redis, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    # Given a gateway with two keys and a cap of 3 streams per key, and a queued job no worker takes (its streams stay open)
    gateway = await gateways.start({"STREAMCREW_API_KEYS": "key-a,key-b", "STREAMCREW_MAX_EVENT_STREAMS_PER_KEY": "3"})
    await redis.hset(keys.job("held"), mapping={"status": "queued", "agent": "echo", "attempts": "0"})
    async with gateway.client("key-a") as a, gateway.client("key-b") as b:
        async with AsyncExitStack() as streams:
            # When key-a opens 3 streams and then a fourth
            held = [await open_stream(streams, a) for _ in range(3)]
            assert [r.status_code for r in held] == [200, 200, 200]
            over = await open_stream(streams, a)
            # Then the fourth is 429 in the gateway's error shape, with Retry-After and a message saying why
            assert over.status_code == 429, "a fourth stream of the key was let open"
            assert int(over.headers["retry-after"]) >= 1
            error = over.json()["error"]
            assert error["code"] == "too_many_streams"
            assert "API key is at its cap of 3 open event streams" in error["message"], error["message"]
            # And another key is not held back by key-a's streams
            theirs = await open_stream(streams, b)
            assert theirs.status_code == 200
            # And /metrics counts the 4 streams open (the refused one not)
            assert await open_streams_metric(b) == 4
        # When key-a's clients hang up
        # Then it may open 3 streams again
        await wait_until(lambda: all_open(a, 3), timeout=10, what="key-a's slots to be given back after its clients hung up")
        # And the gauge is back at 0 once every stream is closed

        async def none_open() -> bool:
            return await open_streams_metric(a) == 0

        await wait_until(none_open, timeout=10, what="streamcrew_http_event_streams back at 0 after every client hung up")


async def test_without_keys_the_cap_counts_per_client_address_and_an_ended_stream_frees_its_slot(
        gateways: GatewayFactory, redis, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    # Given a gateway without API keys and a cap of 1 stream, and a job that has ended
    gateway = await gateways.start({"STREAMCREW_MAX_EVENT_STREAMS_PER_KEY": "1"})
    await redis.hset(keys.job("held"), mapping={"status": "queued", "agent": "echo", "attempts": "0"})
    await redis.hset(keys.job("ended"), mapping={"status": "completed", "agent": "echo", "attempts": "1", "result": "{}"})
    async with gateway.client() as client, gateway.client() as other_client:
        async with AsyncExitStack() as streams:
            # When one client holds a stream, another client from the same address asks for one
            assert (await open_stream(streams, client)).status_code == 200
            over = await open_stream(streams, other_client)
            # Then it is refused: the address holds the cap
            assert over.status_code == 429, "a second stream of the address was let open"
            assert int(over.headers["retry-after"]) >= 1
            assert "client address is at its cap of 1 open event streams" in over.json()["error"]["message"]
        # And a stream that ends by itself (its job has ended) gives its slot back, time after time
        async def read_to_its_end() -> bool:
            answer = await client.get("/jobs/ended/events")  # the whole body: the gateway ends the stream
            return answer.status_code == 200 and "completed" in answer.text

        for _ in range(3):
            await wait_until(read_to_its_end, timeout=10, what="the slot of a stream that ended to be given back")
