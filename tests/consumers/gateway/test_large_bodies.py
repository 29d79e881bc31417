"""Large request bodies, and large stored results read back, take turns (consumers.gateway.large_bodies): one tenant's
many large bodies or reads hold another tenant's requests for about one parse each, not for all of them in a row."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import orjson
import pytest

from consumers.gateway.auth import Caller
from consumers.gateway.errors import ApiError
from consumers.gateway.large_bodies import LargeBodyTurns
from consumers.gateway.settings import GatewaySettings
from consumers.gateway.sse import job_events
from consumers.gateway.state import GatewayState
from streams.connection import connect
from streams.embedded import RedisServer
from streams.keys import Keys
from streams.records import get_job
from tests.consumers.gateway.support import GatewayFactory

LARGE = 1_000_000
WAIT_S = 10.0


async def _enter(turns: LargeBodyTurns, caller: str, size: int, order: list[str], release: asyncio.Event, name: str) -> None:
    async with turns.turn(caller, size):
        order.append(name)
        await release.wait()


async def _until(condition: Callable[[], bool], what: str) -> None:
    async with asyncio.timeout(WAIT_S):
        while not condition():
            await asyncio.sleep(0)
    assert condition(), what


async def _held(turns: LargeBodyTurns, name: str) -> tuple[list[str], asyncio.Event, asyncio.Task[None]]:
    """A large body of caller ``name`` holding the free turn until the event is set: (order entered, event, its task)."""
    order: list[str] = []
    hold = asyncio.Event()
    task = asyncio.create_task(_enter(turns, name, LARGE, order, hold, name))
    await _until(lambda: order == [name], f"{name} takes the free turn")
    return order, hold, task


async def test_one_large_body_at_a_time_and_small_ones_never_wait() -> None:
    turns = LargeBodyTurns()
    order, hold, first = await _held(turns, "a1")
    second = asyncio.create_task(_enter(turns, "b", LARGE, order, asyncio.Event(), "b1"))
    await _until(lambda: turns.waiting() == 1, "a second large body waits")
    # A small body passes while the turn is held
    async with asyncio.timeout(WAIT_S):
        async with turns.turn("b", 100):
            order.append("small")
    assert order == ["a1", "small"]
    hold.set()
    await first
    await _until(lambda: order[-1] == "b1", "the waiting body gets the turn when the first's ends")
    second.cancel()
    await asyncio.gather(second, return_exceptions=True)
    assert turns.waiting() == 0 and not turns._busy


async def test_turns_go_round_robin_over_callers() -> None:
    # Given mallory's three large bodies waiting behind a held turn, then alice's one
    turns = LargeBodyTurns()
    order, go, held = await _held(turns, "x")
    tasks = [held]
    for n in range(3):
        tasks.append(asyncio.create_task(_enter(turns, "mallory", LARGE, order, go, f"m{n}")))
    await _until(lambda: turns.waiting() == 3, "mallory's bodies wait")
    tasks.append(asyncio.create_task(_enter(turns, "alice", LARGE, order, go, "alice")))
    await _until(lambda: turns.waiting() == 4, "alice's body waits")
    go.set()
    async with asyncio.timeout(WAIT_S):
        await asyncio.gather(*tasks)
    # Then alice's goes after mallory's first, not after all three
    assert order == ["x", "m0", "alice", "m1", "m2"]
    assert turns.waiting() == 0 and not turns._busy


async def test_a_caller_with_too_many_large_bodies_waiting_is_told_429() -> None:
    # Given a held turn and two of mallory's large bodies waiting, at most two bodies' bytes waiting per caller
    turns = LargeBodyTurns(max_waiting_bytes=2 * LARGE)
    order, go, held = await _held(turns, "x")
    tasks = [held]
    tasks += [asyncio.create_task(_enter(turns, "mallory", LARGE, order, go, f"m{n}")) for n in range(2)]
    await _until(lambda: turns.waiting() == 2, "mallory's two wait")
    # When mallory sends a third, it is refused at once, clearly; alice's still waits its turn, as small ones pass
    with pytest.raises(ApiError) as refused:
        async with turns.turn("mallory", LARGE):
            pass
    assert (refused.value.status, refused.value.code) == (429, "too_many_large_bodies")
    assert refused.value.headers == {"Retry-After": "1"}
    tasks.append(asyncio.create_task(_enter(turns, "alice", LARGE, order, go, "alice")))
    await _until(lambda: turns.waiting() == 3, "alice's body waits")
    go.set()
    async with asyncio.timeout(WAIT_S):
        await asyncio.gather(*tasks)
    assert order == ["x", "m0", "alice", "m1"] and turns.waiting() == 0


async def test_a_large_body_waiting_past_its_limit_is_told_429_and_the_turns_go_on() -> None:
    # Given a turn held longer than a waiting body may wait
    turns = LargeBodyTurns(max_wait_s=0.05)
    order, hold, first = await _held(turns, "a")
    # When another waits past the limit, it is refused clearly, not as a Redis outage
    with pytest.raises(ApiError) as refused:
        async with asyncio.timeout(WAIT_S), turns.turn("b", LARGE):
            pass
    assert (refused.value.status, refused.value.code) == (429, "too_many_large_bodies")
    assert "waited 0.05s for its turn" in refused.value.message
    # And the turns go on: nothing of it is left waiting, and the next body gets the turn once the first's ends
    assert turns.waiting() == 0
    hold.set()
    await first
    async with asyncio.timeout(WAIT_S), turns.turn("b", LARGE):
        order.append("b")
    assert order == ["a", "b"] and turns.waiting() == 0 and not turns._busy


async def test_a_cancelled_waiter_passes_the_turn_on() -> None:
    turns = LargeBodyTurns()
    order, hold, first = await _held(turns, "a")
    gone = asyncio.create_task(_enter(turns, "b", LARGE, order, asyncio.Event(), "b"))
    last = asyncio.create_task(_enter(turns, "c", LARGE, order, asyncio.Event(), "c"))
    await _until(lambda: turns.waiting() == 2, "two wait")
    hold.set()  # the turn is handed to b ...
    await first
    gone.cancel()  # ... whose request is cancelled (a deadline's 503) before it ran
    await asyncio.gather(gone, return_exceptions=True)
    await _until(lambda: order == ["a", "c"] or order == ["a", "b", "c"], "the turn reaches c")
    last.cancel()
    await asyncio.gather(last, return_exceptions=True)
    assert turns.waiting() == 0 and not turns._busy


async def test_large_bodies_in_turns_are_each_answered_as_alone(gateways: GatewayFactory) -> None:
    """Functional, through a real gateway (how long another tenant waits is bench/bench_neighbour.py's figure)."""
    # Given a gateway with two tenants; mallory sends, at once, four jobs of ~0.6 MB, four bodies over the 1 MiB
    # request limit and a task whose query is 100,000 characters, all large enough to take turns
    gateway = await gateways.start({"STREAMCREW_API_KEYS": "k-alice:alice,k-mallory:mallory"})
    valid = [orjson.dumps({"agent": "echo", "id": f"big-{n}", "data": {f"k{i:06d}": i for i in range(35_000)}}) for n in range(4)]
    over = orjson.dumps({"agent": "echo", "data": {f"k{i:07d}": i for i in range(110_000)}})
    task = orjson.dumps({"query": "q" * 100_000})
    assert min(len(b) for b in (*valid, over, task)) > 64 * 1024
    async with gateway.client("k-alice") as alice, gateway.client("k-mallory") as mallory:
        job_id = (await alice.post("/jobs", json={"agent": "echo", "data": {}})).json()["job_id"]

        async def send(path: str, body: bytes) -> int:
            return (await mallory.post(path, content=body, headers={"Content-Type": "application/json"})).status_code

        sending = asyncio.gather(*(send("/jobs", b) for b in valid), *(send("/jobs", over) for _ in range(4)), send("/tasks", task))
        status = await alice.get(f"/jobs/{job_id}")
        answers = await sending
        # Then each answer is the one it gets alone, and alice's status read is answered meanwhile
        assert answers == [202] * 4 + [413] * 4 + [202], answers
        assert status.status_code == 200, status.text
        for n in range(4):
            record = (await mallory.get(f"/jobs/big-{n}")).json()
            assert record["tenant"] == "mallory" and record["status"] in ("queued", "running", "completed"), record


async def test_large_results_share_the_turns_and_are_refused_as_results() -> None:
    # Given a turn held by mallory's large body, and a read of her large stored result waiting past its limit
    turns = LargeBodyTurns(max_wait_s=0.05)
    order, hold, first = await _held(turns, "mallory")
    with pytest.raises(ApiError) as refused:
        async with asyncio.timeout(WAIT_S), turns.turn("mallory", LARGE, what="results"):
            pass
    # Then it is refused as a result read, clearly (the gateway's GET /jobs/{id} and /result, an event stream's event)
    assert (refused.value.status, refused.value.code) == (429, "too_many_large_results")
    assert "large results waited 0.05s for its turn to be parsed" in refused.value.message
    hold.set()
    await first
    async with asyncio.timeout(WAIT_S), turns.turn("alice", LARGE, what="results"):
        order.append("alice")
    assert order == ["mallory", "alice"] and not turns._busy


async def test_large_results_read_at_once_are_each_answered_whole(gateways: GatewayFactory, own_redis: RedisServer, keys: Keys) -> None:
    """Functional, through a real gateway: reads of a large stored result take turns to parse it, each answered as alone."""
    # Given acme's completed job whose result is 0.86 MiB of empty lists (~30 ms to parse) with its usage
    result = [[] for _ in range(300_000)]
    redis = connect(own_redis.url)
    try:
        await redis.hset(keys.job("large"), mapping={
            "status": "completed", "agent": "echo", "attempts": "1", "tenant": "acme", "result": orjson.dumps(result).decode(),
            "usage": '{"total_tokens": 7}', "submitted_at": "1700000000000", "finished_at": "1700000001000"})
        gateway = await gateways.start({"STREAMCREW_API_KEYS": "k-acme:acme,k-globex:globex"}, redis_url=own_redis.url)
        async with gateway.client("k-acme") as acme, gateway.client("k-globex") as globex:
            # When acme reads it ten times at once by each route that shows it
            answers = await asyncio.gather(*(acme.get(path) for path in ("/jobs/large/result", "/jobs/large") for _ in range(10)))
            # Then every read is answered 200, whole, as a read alone is
            assert [a.status_code for a in answers] == [200] * 20, [a.text[:200] for a in answers if a.status_code != 200]
            alone = {path: (await acme.get(path)).content for path in ("/jobs/large/result", "/jobs/large")}
            assert all(a.content == alone["/jobs/large/result"] for a in answers[:10])
            assert all(a.content == alone["/jobs/large"] for a in answers[10:])
            event = orjson.loads(alone["/jobs/large/result"])
            assert event["result"] == result and event["usage"] == {"total_tokens": 7} and event["status"] == "completed"
            assert orjson.loads(alone["/jobs/large"])["result"] == result
            # And another tenant's read of that id is a 404, its result not parsed for it
            refused = await globex.get("/jobs/large/result")
            assert refused.status_code == 404 and refused.json()["error"]["code"] == "job_not_found"
    finally:
        await redis.aclose()



async def test_an_event_streams_read_refused_its_turn_looks_again_later(redis, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    """In process, against a real Redis: the stream's generator itself, with a turn held as long as the test wants."""
    # Given a stream following acme's running job, on a gateway whose large parses wait 0.05 s for their turn at most
    settings = GatewaySettings(redis_url="redis://unused", prefix=keys.prefix, sse_poll_s=0.01, sse_poll_max_s=0.05)
    state = GatewayState.build(settings, redis)
    state.large_bodies = LargeBodyTurns(max_wait_s=0.05)
    await redis.hset(keys.job("followed"), mapping={"status": "running", "agent": "echo", "attempts": "1", "tenant": "acme"})
    record = await get_job(redis, keys, "followed")
    assert record is not None
    events = job_events("followed", state, (record, None), Caller(bucket="acme-key", tenant="acme"))
    assert (await anext(events)).id == "1-running"
    # When it completes with a large result while another large parse holds the turn past that wait
    order, hold, holder = await _held(state.large_bodies, "globex-key")
    large = ["x" * 100] * 200
    await redis.hset(keys.job("followed"), mapping={"status": "completed", "result": orjson.dumps(large).decode()})
    following = asyncio.ensure_future(anext(events))
    await asyncio.sleep(0.3)  # several polls, each refused its turn after 0.05 s
    # Then the stream is not broken off: it waits, and sends the completed event once its read gets a turn
    assert not following.done(), following
    hold.set()
    await holder
    async with asyncio.timeout(WAIT_S):
        event = await following
    assert event.id == "1-completed" and orjson.loads(event.raw_data)["result"] == large, event
    await events.aclose()
