"""The gateway's access log (STREAMCREW_ACCESS_LOG): one line per request, never a request's query."""

from __future__ import annotations

from tests.consumers.gateway.support import GatewayFactory
from tests.support import wait_until


async def test_the_access_log_shows_each_request_without_its_query(gateways: GatewayFactory) -> None:
    # Given a gateway with keys and its access log on
    gateway = await gateways.start({"STREAMCREW_ACCESS_LOG": "true", "STREAMCREW_API_KEYS": "acme-key-0123456789:acme"})
    # When a client puts its key and a token in a URL's query (a browser EventSource cannot send headers)
    async with gateway.client() as client:
        answer = await client.get("/jobs/job-1?api_key=acme-key-0123456789&token=tok-QQ77abcdefgh")
    assert answer.status_code == 401, answer.text
    log = gateway.child.log_text
    await wait_until(lambda: "/jobs/job-1" in log(), timeout=10, what="the request's access line")
    # Then the line names the request and its answer, not the query (before: both secrets in the log)
    line = next(line for line in log().splitlines() if "/jobs/job-1" in line)
    assert '"GET /jobs/job-1?[query] HTTP/1.1" 401' in line, line
    for secret in ("acme-key-0123456789", "tok-QQ77abcdefgh", "api_key"):
        assert secret not in log(), secret
