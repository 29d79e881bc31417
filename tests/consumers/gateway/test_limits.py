"""Auth (401, tenants), body caps (413) and the shared rate limit (429)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from streams.keys import Keys
from tests.consumers.gateway.support import GatewayFactory

JOB = {"agent": "echo", "data": {}}


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
