"""``streamcrew mock-llm`` as a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import aiohttp
import httpx
import pytest

from consumers.mock_llm import MockOptions, RunningMock, running_mock_llm
from consumers.processes import Child, streamcrew_cmd
from tests.support import start_on_drawn_port

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


async def test_health_and_unknown_paths(mock_llm: RunningMock) -> None:
    async with httpx.AsyncClient(base_url=mock_llm.url) as client:
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        assert (await client.post("/v1/embeddings", json={})).status_code == 404
        assert (await client.post("/v1/chat/completions", content=b"{not json")).status_code == 400
        answer = (await client.post("/v1/chat/completions", json=BODY)).json()
        assert answer["object"] == "chat.completion" and answer["usage"]["total_tokens"] > 0


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
@pytest.mark.parametrize("body", [
    {"messages": "hi"},
    {"messages": [1]},
    {"messages": {"role": "user"}},
    {"messages": [{"role": "user", "content": "x"}], "tools": ["lookup_order"]},
    {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "t", "parameters": {"properties": "x"}},
                                                                 "name": "t", "input_schema": {"properties": "x"}}]},
])
async def test_a_request_of_the_wrong_shape_is_a_400_like_a_providers(mock_llm: RunningMock, path: str, body: dict[str, object]) -> None:
    # A provider refuses it with a 400, which the client does not retry; a 500 (a crash) would be retried 6 times
    async with httpx.AsyncClient(base_url=mock_llm.url) as client:
        response = await client.post(path, json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("mock_options", [MockOptions(key_rps=2.0)])
async def test_per_key_limit_answers_429_with_retry_after(mock_llm: RunningMock) -> None:
    async with httpx.AsyncClient(base_url=mock_llm.url) as client:
        statuses = []
        for key in ("a", "a", "a", "b"):
            response = await client.post("/v1/chat/completions", json=BODY, headers={"authorization": f"Bearer {key}"})
            statuses.append(response.status_code)
            if response.status_code == 429:
                assert int(response.headers["retry-after"]) >= 1
    assert statuses == [200, 200, 429, 200]


async def test_faults_are_reproducible_with_a_seed() -> None:
    async def run() -> list[int]:
        async with running_mock_llm(MockOptions(rate_limit=0.3, error_rate=0.3, seed=11)) as mock:
            async with httpx.AsyncClient(base_url=mock.url) as client:
                return [(await client.post("/v1/chat/completions", json=BODY)).status_code for _ in range(20)]

    first, second = await run(), await run()
    assert first == second and {200, 429} <= set(first) and {500, 503} & set(first)


async def test_a_subprocess_server_holds_2000_concurrent_slow_requests() -> None:
    # Given mock-llm in its own process with 1 s latency
    async with running_mock_llm(MockOptions(latency_s=1.0), subprocess_=True) as mock:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=2000), timeout=aiohttp.ClientTimeout(30)) as client:

            async def post() -> int:
                async with client.post(mock.url + "/v1/chat/completions", json=BODY) as r:
                    await r.read()
                    return r.status

            started = time.monotonic()
            # When 2000 requests are in flight at once
            statuses = await asyncio.gather(*(post() for _ in range(2000)))
            elapsed = time.monotonic() - started
    # Then all are answered, concurrently rather than in turn: in turn would take 2,000 s. The bound is
    # loose on purpose (this is behaviour, not speed; a loaded 2-core machine took 10.7 s): bench/ measures speed.
    assert all(s == 200 for s in statuses)
    assert elapsed < 120, f"2000 requests of 1 s latency took {elapsed:.1f}s: they were not served concurrently"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_streamcrew_mock_llm_exits_0_after_a_signal(tmp_path: Path, signum: signal.Signals) -> None:
    # Given `streamcrew mock-llm` in its own process, answering (Redis: a closed port; it uses none)
    def start(port: int) -> Child:
        return Child(streamcrew_cmd("mock-llm", "--port", str(port)), env={"STREAMCREW_REDIS_URL": "redis://127.0.0.1:1/0"},
                     log_path=tmp_path / f"mock-llm-{port}.log")

    child, port = start_on_drawn_port(start, lambda port: f"mock-llm on http://127.0.0.1:{port}/v1", what="mock-llm", timeout=30)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            assert (await client.post("/v1/chat/completions", json=BODY)).status_code == 200
        # When it gets the signal
        child.process.send_signal(signum)
        code = await asyncio.to_thread(child.wait, 15)
    finally:
        child.stop()
    # Then it shuts down gracefully and exits 0, as the gateway, worker and notifier do (not 128 + the signal's number)
    assert code == 0, f"exit code {code}:\n{child.log_text()[-3000:]}"
    assert "Traceback" not in child.log_text()


async def test_a_mock_llm_in_a_thread_leaves_the_signal_handlers_alone() -> None:
    # Signals reach the main thread only: a server in another thread must neither set handlers nor restore
    # (or raise) any when it stops, or it would take SIGINT/SIGTERM from the process that runs it (pytest, a bench)
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    async with running_mock_llm() as mock, httpx.AsyncClient(base_url=mock.url) as client:
        assert (await client.get("/healthz")).status_code == 200
        assert {sig: signal.getsignal(sig) for sig in before} == before
    assert {sig: signal.getsignal(sig) for sig in before} == before
