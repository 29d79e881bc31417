"""Invalid bodies are 422 with a message that names the bad field."""

from __future__ import annotations

import pytest

from tests.consumers.gateway.support import GatewayFactory

INVALID = [
    ({"data": {}}, "agent", "Field required"),
    ({"agent": "echo"}, "data", "Field required"),
    ({"agent": "echo", "data": [1, 2]}, "data", "object"),
    ({"agent": "echo", "data": "text"}, "data", "object"),
    ({"agent": "", "data": {}}, "agent", "at least 1"),
    ({"agent": "echo", "data": {}, "priority": 11}, "priority", "0-10"),
    ({"agent": "echo", "data": {}, "priority": "urgent"}, "priority", "high, normal, low"),
    ({"agent": "echo", "data": {}, "priority": True}, "priority", "0-10"),
    ({"agent": "echo", "data": {}, "webhook": "ftp://example.com/hook"}, "webhook", "http"),
    ({"agent": "echo", "data": {}, "webhook": "not a url"}, "webhook", "http"),
    ({"agent": "echo", "data": {}, "max_attempts": 0}, "max_attempts", "greater than or equal to 1"),
    ({"agent": "echo", "data": {}, "timeout_s": -1}, "timeout_s", "greater than 0"),
    ({"agent": "echo", "data": {}, "id": "a/b"}, "id", "pattern"),
    ({"agent": "echo", "data": {}, "colour": "red"}, "colour", "Extra inputs"),
    ({"agent": "nosuchagent", "data": {}}, "agent", "unknown agent 'nosuchagent'"),
]


@pytest.fixture
async def client(gateways: GatewayFactory):  # type: ignore[no-untyped-def]
    gateway = await gateways.start({"STREAMCREW_KNOWN_AGENTS": "echo,order"})
    async with gateway.client() as c:
        yield c


async def test_invalid_bodies_are_422_naming_the_field(client) -> None:  # type: ignore[no-untyped-def]
    for body, field, words in INVALID:
        response = await client.post("/jobs", json=body)
        assert response.status_code == 422, (body, response.text)
        error = response.json()["error"]
        assert error["code"] == "invalid_request"
        assert error["message"].startswith(f"{field}:") or f"; {field}:" in error["message"], (body, error)
        assert words in error["message"], (body, error["message"])


async def test_a_body_that_is_not_json_is_422(client) -> None:  # type: ignore[no-untyped-def]
    response = await client.post("/jobs", content=b'{"agent": "echo", "data": ', headers={"content-type": "application/json"})
    assert response.status_code == 422
    assert "JSON" in response.json()["error"]["message"]
    not_json = await client.post("/jobs", content=b"agent=echo", headers={"content-type": "text/plain"})
    assert not_json.status_code == 422


async def test_valid_priorities_choose_the_lane(client) -> None:  # type: ignore[no-untyped-def]
    for priority, lane in ((10, "high"), (7, "high"), (5, "normal"), (0, "low"), ("low", "low"), (None, "normal")):
        response = await client.post("/jobs", json={"agent": "echo", "data": {}, "priority": priority})
        assert response.status_code == 202, response.text
        assert response.json()["lane"] == lane, priority
