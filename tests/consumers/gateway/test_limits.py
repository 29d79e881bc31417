"""Auth (401, tenants), body caps (413) and the shared rate limit (429)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from streams.keys import Keys
from tests.consumers.gateway.support import GatewayFactory

JOB = {"agent": "echo", "data": {}}
GATEWAY_DOC = Path(__file__).resolve().parents[3] / "docs" / "gateway.md"


async def test_keys_are_required_when_configured(gateways: GatewayFactory) -> None:
    # Given a gateway with one unbound key and one bound to tenant acme
    gateway = await gateways.start({"STREAMCREW_API_KEYS": "k-operator,k-acme:acme"})
    async with gateway.client() as anonymous, gateway.client("wrong") as wrong, \
            gateway.client("k-operator") as operator, gateway.client("k-acme") as acme:
        # Then requests without a key or with a wrong one are 401 with a Bearer challenge
        for client, message in ((anonymous, "missing"), (wrong, "invalid")):
            for method, path in (("POST", "/jobs"), ("GET", "/jobs/x"), ("GET", "/queue/stats"), ("GET", "/dead"), ("GET", "/metrics")):
                response = await client.request(method, path, json=JOB if method == "POST" else None)
                assert response.status_code == 401, (method, path, response.text)
                assert response.headers["www-authenticate"] == "Bearer"
                assert message in response.json()["error"]["message"]
        # And the health checks need no key
        assert (await anonymous.get("/healthz")).status_code == 200
        assert (await anonymous.get("/readyz")).status_code == 200

        # And a valid key submits
        mine = await operator.post("/jobs", json=JOB)
        assert mine.status_code == 202
        # And a tenant-bound key has its tenant stamped on its jobs
        theirs = await acme.post("/jobs", json=JOB)
        assert theirs.status_code == 202
        record = await acme.get(f"/jobs/{theirs.json()['job_id']}")
        assert record.json()["tenant"] == "acme"
        # And it sees only its tenant's jobs, may not claim another tenant, and has no queue-wide view
        assert (await acme.get(f"/jobs/{mine.json()['job_id']}")).status_code == 404
        other = await acme.post("/jobs", json={**JOB, "tenant": "globex"})
        assert other.status_code == 403 and other.json()["error"]["code"] == "tenant_mismatch"
        assert (await acme.get("/queue/stats")).status_code == 403
        assert (await operator.get("/queue/stats")).status_code == 200
        # And /metrics (queue-wide gauges, consumer names) is as closed to it as /queue/stats
        forbidden = await acme.get("/metrics")
        assert forbidden.status_code == 403 and forbidden.json()["error"]["code"] == "forbidden"
        assert (await operator.get("/metrics")).status_code == 200


async def test_bodies_over_the_cap_are_413(gateways: GatewayFactory) -> None:
    # Given a 4 KB body cap and a 1 KB encoded-request cap
    gateway = await gateways.start({"STREAMCREW_MAX_BODY_BYTES": "4000", "STREAMCREW_MAX_REQUEST_BYTES": "1000"})
    async with gateway.client() as client:
        # Then a body over 4 KB is refused with a declared length
        big = await client.post("/jobs", json={"agent": "echo", "data": {"blob": "x" * 5000}})
        assert big.status_code == 413
        assert big.json()["error"]["code"] == "body_too_large"

        # And without one (chunked), as soon as it passes the cap
        async def chunks() -> AsyncIterator[bytes]:
            yield b'{"agent": "echo", "data": {"blob": "'
            for _ in range(10):
                yield b"y" * 1000
            yield b'"}}'

        chunked = await client.post("/jobs", content=chunks(), headers={"content-type": "application/json"})
        assert chunked.status_code == 413
        assert chunked.json()["error"]["code"] == "body_too_large"

        # And a body under the cap whose encoded request is over STREAMCREW_MAX_REQUEST_BYTES
        encoded = await client.post("/jobs", json={"agent": "echo", "data": {"blob": "z" * 2000}})
        assert encoded.status_code == 413
        assert encoded.json()["error"]["code"] == "request_too_large"
        # And a small one still passes
        assert (await client.post("/jobs", json=JOB)).status_code == 202


async def test_rate_limit_is_shared_across_replicas(gateways: GatewayFactory, redis, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    # Given two gateway replicas with a limit of 0.5 requests/s and a burst of 3 per key
    env = {"STREAMCREW_API_KEYS": "k1,k2", "STREAMCREW_RATE_LIMIT_PER_S": "0.5", "STREAMCREW_RATE_LIMIT_BURST": "3"}
    a, b = await gateways.start(env), await gateways.start(env)
    async with a.client("k1") as a1, b.client("k1") as b1, b.client("k2") as b2:
        # When key k1 makes three requests across both replicas
        assert (await a1.post("/jobs", json=JOB)).status_code == 202
        assert (await a1.get("/queue/stats")).status_code == 200
        assert (await b1.post("/jobs", json=JOB)).status_code == 202
        # Then its fourth, on either replica, is 429 with Retry-After
        for client in (b1, a1):
            limited = await client.post("/jobs", json=JOB)
            assert limited.status_code == 429
            assert limited.json()["error"]["code"] == "rate_limited"
            assert 1 <= int(limited.headers["retry-after"]) <= 2
        # And another key has its own bucket
        assert (await b2.post("/jobs", json=JOB)).status_code == 202
        # And the buckets live under the prefix
        buckets = [k async for k in redis.scan_iter(match=f"{keys.prefix}:ratelimit:*")]
        assert len(buckets) == 2
        # And health checks are never limited
        for _ in range(5):
            assert (await b1.get("/healthz")).status_code == 200


async def test_cors_lets_configured_browser_origins_in(gateways: GatewayFactory) -> None:
    gateway = await gateways.start({"STREAMCREW_CORS_ORIGINS": "https://app.example.com"})
    async with gateway.client() as client:
        preflight = await client.options("/jobs", headers={"Origin": "https://app.example.com", "Access-Control-Request-Method": "POST",
                                                           "Access-Control-Request-Headers": "authorization,content-type"})
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == "https://app.example.com"
        posted = await client.post("/jobs", json=JOB, headers={"Origin": "https://app.example.com"})
        assert posted.status_code == 202 and posted.headers["access-control-allow-origin"] == "https://app.example.com"
        stranger = await client.post("/jobs", json=JOB, headers={"Origin": "https://evil.example.net"})
        assert "access-control-allow-origin" not in stranger.headers


async def test_cors_lets_an_allowed_origin_call_every_route_of_the_api(gateways: GatewayFactory) -> None:
    # Given a gateway that lets one browser origin in
    gateway = await gateways.start({"STREAMCREW_CORS_ORIGINS": "https://ops.example.com"})
    origin = {"Origin": "https://ops.example.com"}
    async with gateway.client() as client:
        document = (await client.get("/openapi.json")).json()
        routes = [(method.upper(), path) for path, ops in document["paths"].items() for method in ops]
        assert ("DELETE", "/dead") in routes
        # When the browser asks before each route's call, as it does for one with an Authorization header
        for method, path in [*routes, ("HEAD", "/healthz")]:
            preflight = await client.options(path, headers={**origin, "Access-Control-Request-Method": method,
                                                           "Access-Control-Request-Headers": "authorization"})
            # Then each method is allowed (DELETE /dead, the purge, was refused: 400 "Disallowed CORS method")
            assert preflight.status_code == 200, (method, path, preflight.text)
            assert method in preflight.headers["access-control-allow-methods"]
        # And the purge itself answers the origin
        purged = await client.delete("/dead", headers=origin)
        assert purged.status_code == 200 and purged.headers["access-control-allow-origin"] == "https://ops.example.com", purged.text


async def test_x_forwarded_for_is_ignored_unless_the_proxy_is_trusted(gateways: GatewayFactory) -> None:
    # Given a gateway without keys, limiting each client address to a burst of 2
    env = {"STREAMCREW_RATE_LIMIT_PER_S": "0.1", "STREAMCREW_RATE_LIMIT_BURST": "2"}
    gateway = await gateways.start(env)
    async with gateway.client() as client:
        # When a client on the host sends each request as from another address
        answers = [await client.post("/jobs", json=JOB, headers={"X-Forwarded-For": f"203.0.113.{n}"}) for n in range(4)]
        # Then the header is not believed: all four share the loopback bucket, so the third is 429
        assert [a.status_code for a in answers] == [202, 202, 429, 429]
    # Given a gateway that trusts the proxy on 127.0.0.1
    trusting = await gateways.start({**env, "STREAMCREW_TRUSTED_PROXIES": "127.0.0.1"})
    async with trusting.client() as client:
        # Then the proxy's X-Forwarded-For names the client: one bucket per forwarded address
        answers = [await client.post("/jobs", json=JOB, headers={"X-Forwarded-For": f"203.0.113.{n}"}) for n in range(4)]
        assert [a.status_code for a in answers] == [202] * 4


async def test_the_openapi_document_needs_a_key_when_keys_are_configured(gateways: GatewayFactory) -> None:
    # Given a gateway with keys
    gateway = await gateways.start({"STREAMCREW_API_KEYS": "k-operator,k-acme:acme"})
    async with gateway.client() as anonymous, gateway.client("wrong") as wrong, gateway.client("k-acme") as acme:
        # Then /openapi.json is 401 without a valid key, like every route but the health checks
        for client in (anonymous, wrong):
            refused = await client.get("/openapi.json")
            assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer", refused.text
        # And any valid key reads it
        document = await acme.get("/openapi.json")
        assert document.status_code == 200 and "/jobs" in document.json()["paths"]
        assert "/openapi.json" not in document.json()["paths"]
        # And the interactive docs, whose pages cannot send a key, are off
        for path in ("/docs", "/redoc", "/docs/oauth2-redirect"):
            assert (await acme.get(path)).status_code == 404, path
    # Given a gateway without keys
    open_gateway = await gateways.start()
    async with open_gateway.client() as anonymous:
        # Then the document and the interactive docs are open
        for path in ("/openapi.json", "/docs", "/redoc"):
            assert (await anonymous.get(path)).status_code == 200, path


async def test_failed_authentication_is_rate_limited_per_client_address(gateways: GatewayFactory, redis, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    # Given a gateway with keys and a limit of a burst of 3, refilling one token every 10 seconds
    env = {"STREAMCREW_API_KEYS": "k1", "STREAMCREW_RATE_LIMIT_PER_S": "0.1", "STREAMCREW_RATE_LIMIT_BURST": "3"}
    gateway = await gateways.start(env)
    async with gateway.client() as anonymous, gateway.client("guess-1") as guess1, gateway.client("guess-2") as guess2, \
            gateway.client("k1") as valid:
        # When one address fails to authenticate three times, with wrong keys or none
        assert [(await c.get("/jobs/x")).status_code for c in (guess1, guess2, anonymous)] == [401, 401, 401]
        # Then its next attempts, whatever key they try, are 429 with Retry-After
        for client in (guess1, guess2, anonymous):
            limited = await client.post("/jobs", json=JOB)
            assert limited.status_code == 429, limited.text
            assert limited.json()["error"]["code"] == "rate_limited"
            assert 1 <= int(limited.headers["retry-after"]) <= 10
        # And the failures drew from the address's bucket, so a valid key from it is served from its own
        assert await redis.exists(keys.ratelimit("ip:127.0.0.1"))
        assert (await valid.post("/jobs", json=JOB)).status_code == 202


@pytest.mark.parametrize("declared", ["-5", "1e3"])
async def test_a_malformed_content_length_is_uvicorns_plain_400_as_documented(gateways: GatewayFactory, declared: str) -> None:
    # Given a gateway
    gateway = await gateways.start()
    # When a request declares a Content-Length that is not a length
    reader, writer = await asyncio.open_connection("127.0.0.1", gateway.port)
    try:
        writer.write(f"POST /jobs HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\nContent-Length: {declared}\r\n\r\n".encode())
        answer = await asyncio.wait_for(reader.read(), 10)  # uvicorn closes the connection after its answer
    finally:
        writer.close()
    # Then uvicorn answers it before the app runs: 400 in plain text, not the API's JSON shape
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ") and b"content-type: text/plain" in head.lower(), answer
    assert body == b"Invalid HTTP request received."
    # And the docs say so, promising no JSON error for it
    doc = GATEWAY_DOC.read_text()
    assert "`Invalid HTTP request received.`" in doc and "bad_request" not in doc
