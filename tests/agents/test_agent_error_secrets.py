"""An agent's error text is data (the result's ``error``, the dead letter, the webhook body, the worker's log),
so URLs in it lose their credentials and query: httpx and aiohttp quote the URL a failed call asked for.

Real Redis, a real worker process, a real HTTP peer on loopback answering 401.
"""

from __future__ import annotations

from typing import Any

import pytest

from streams.keys import Keys
from streams.producer import Producer
from tests.hostile import Start, response, started_peers
from tests.support import WorkerFactory, wait_results

APP = "tests.agents.upstream_app"
PASSWORD, QUERY_KEY = "pw-Xq81LmZ", "qk-77RrTt3"
peer = pytest.fixture(started_peers, name="peer")


@pytest.mark.parametrize("client", ["httpx", "aiohttp"])
async def test_an_upstream_error_reaches_no_result_dead_letter_or_log_with_the_urls_secrets(
    client: str, redis: Any, keys: Keys, producer: Producer, workers: WorkerFactory, peer: Start,
) -> None:
    # Given an agent whose upstream (credentials and ?api_key= in its URL) refuses every call
    async def refuse(writer: Any, _: int) -> bool:
        writer.write(response(401, b'{"error": "no"}', reason="Unauthorized"))
        return False

    upstream = await peer(refuse)
    url = upstream.url.replace("http://", f"http://agent:{PASSWORD}@") + f"/v1/items?api_key={QUERY_KEY}&page=2"
    worker = workers.start("--app", APP, env={"UPSTREAM_URL": url})
    # When a job of it fails both its attempts
    await producer.publish("upstream_call", {"client": client}, id=f"upstream-{client}", max_attempts=2)
    (result,) = await wait_results(redis, keys, 1, timeout=30)
    # Then the error still says what failed and where, but none of the URL's secrets
    assert result.status == "failed" and "401" in (result.error or "") and "127.0.0.1" in (result.error or ""), result.error
    (_, letter), = await redis.xrange(keys.dead)
    worker.terminate()
    worker.wait(timeout=30)
    for where, text in (("result", result.error or ""), ("dead letter", letter["error"]), ("worker log", worker.log_text())):
        assert PASSWORD not in text and QUERY_KEY not in text, f"{where}: {text[-3000:]}"
