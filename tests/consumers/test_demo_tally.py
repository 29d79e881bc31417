"""The demo's live figures read the workers' /metrics. A worker the demo SIGKILLs frees its port, and another process may
take it: what answers there then (an error page, HTML) keeps that worker's last figures; it does not end the demo
(a test run once saw the demo exit with "invalid metric name:<!DOCTYPE HTML>")."""

from __future__ import annotations

import httpx
import pytest
from redis.asyncio import Redis

from consumers.demo.tally import Tally
from streams.keys import Keys
from tests.squatter import Page, squatting

METRICS = b"# TYPE streamcrew_reclaimed_total counter\nstreamcrew_reclaimed_total 3.0\n"
ERROR_PAGE = b"<!DOCTYPE HTML>\n<html><head><title>Error response</title></head><body>404</body></html>\n"


@pytest.mark.parametrize("status", [200, 404])
async def test_a_metrics_port_answered_by_another_process_keeps_the_workers_last_figures(
        redis: Redis, keys: Keys, status: int) -> None:
    page = Page(200, METRICS)
    with squatting(page) as port:
        tally = Tally(redis=redis, keys=keys, metrics_urls=[f"http://127.0.0.1:{port}/metrics"])
        async with httpx.AsyncClient() as http:
            # Given a worker's figures read once
            await tally.poll(http)
            assert tally.reclaims == 3
            # When its port answers with something that is no metrics page
            page.status, page.body = status, ERROR_PAGE
            await tally.poll(http)
            # Then the demo goes on with that worker's last figures
            assert tally.reclaims == 3
