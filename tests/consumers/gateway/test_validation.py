"""Invalid bodies are 422 with a message that names the bad field."""

from __future__ import annotations

import asyncio

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
    ({"agent": "echo", "data": {}, "timeout_s": True}, "timeout_s", "valid number"),  # was read as 1 s
    ({"agent": "echo", "data": {}, "timeout_s": "5"}, "timeout_s", "valid number"),  # max_attempts and deadline refuse strings too
    ({"agent": "echo", "data": {}, "id": "a/b"}, "id", "ASCII letters, digits"),
    ({"agent": "echo", "data": {}, "id": "commande-é"}, "id", "ASCII letters, digits"),
    ({"agent": "echo", "data": {}, "id": "x" * 513}, "id", "at most 512"),
    ({"agent": "echo", "data": {}, "id": "1764580000000-0"}, "id", "reserved"),
    ({"agent": "echo", "data": {}, "id": "normal:1764580000000-3"}, "id", "reserved"),
    ({"agent": "echo", "data": {}, "id": "ord-9::ship"}, "id", "'::' is reserved"),  # another tenant's workflow step
    ({"agent": "echo", "data": {"n": 2**64}}, "data", "64-bit"),
    ({"agent": "echo", "data": {}, "colour": "red"}, "colour", "Extra inputs"),
    ({"agent": "nosuchagent", "data": {}}, "agent", "unknown agent 'nosuchagent'"),
    ({"agent": "echo", "data": {}, "deadline": 10**15}, "deadline", "less than or equal to"),  # past the year 9999
    ({"agent": "echo", "data": {}, "tenant": "acme corp"}, "tenant", "must not contain whitespace or control characters"),
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


async def test_a_task_user_id_with_a_space_is_refused_in_words(client) -> None:  # type: ignore[no-untyped-def]
    response = await client.post("/tasks", json={"query": "hello", "user_id": "user 001"})
    assert response.status_code == 422
    message = response.json()["error"]["message"]
    assert message == "user_id: must not contain whitespace or control characters", message


@pytest.mark.parametrize("number", ["1e400", "-1e400", "NaN", "Infinity", "-Infinity"])
async def test_nan_and_infinity_are_refused_not_turned_into_null(client, number: str) -> None:  # type: ignore[no-untyped-def]
    body = f'{{"agent": "echo", "data": {{"x": {{"y": [1, {number}]}}}}}}'.encode()
    response = await client.post("/jobs", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["message"].startswith("data: holds NaN or Infinity"), response.text


async def test_a_poison_request_fails_alone_among_concurrent_ones(client) -> None:  # type: ignore[no-untyped-def]
    # Given 60 concurrent submissions (batched together by the gateway), one holding an integer over 64 bits
    bodies = [{"agent": "echo", "data": {"i": i}} for i in range(60)]
    bodies[17] = {"agent": "echo", "data": {"i": 2**70}}
    answers = await asyncio.gather(*(client.post("/jobs", json=body) for body in bodies))
    # Then the poison one is 422 with the reason and the others are queued
    assert answers[17].status_code == 422 and "64-bit" in answers[17].json()["error"]["message"], answers[17].text
    assert [a.status_code for i, a in enumerate(answers) if i != 17] == [202] * 59


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


@pytest.mark.parametrize("listed", ["", " , "])
async def test_an_empty_known_agents_list_accepts_any_agent(gateways: GatewayFactory, listed: str) -> None:
    # Given STREAMCREW_KNOWN_AGENTS set but empty, as a deployment template leaves it
    gateway = await gateways.start({"STREAMCREW_KNOWN_AGENTS": listed})
    async with gateway.client() as client:
        # Then it means unset, as an empty STREAMCREW_API_KEYS does: any agent name is accepted
        for agent in ("echo", "anything"):
            answer = await client.post("/jobs", json={"agent": agent, "data": {}})
            assert answer.status_code == 202, answer.text


async def test_workflow_steps_are_held_to_the_known_agents_too(gateways: GatewayFactory) -> None:
    # Given a deployment that runs workflows of echo steps only
    gateway = await gateways.start({"STREAMCREW_KNOWN_AGENTS": "workflow,echo"})
    steps = [{"id": "a", "agent": "echo", "data": {}}, {"id": "b", "agent": "ask", "data": {}, "after": ["a"]}]
    async with gateway.client() as client:
        refused = await client.post("/jobs", json={"agent": "workflow", "data": {"steps": steps}})
        accepted = await client.post("/jobs", json={"agent": "workflow", "data": {"steps": steps[:1]}})
    # Then a step of another agent is refused as the job would be (before: 202, and the step ran)
    assert refused.status_code == 422 and refused.json()["error"]["message"].startswith("data.steps: unknown agent 'ask'"), refused.text
    assert accepted.status_code == 202, accepted.text


async def test_a_workflows_own_attempts_and_time_limit_are_refused_naming_each_field(gateways: GatewayFactory) -> None:
    # Given a workflow sent with request-level limits (a workflow's are its steps' and its data's)
    gateway = await gateways.start({"STREAMCREW_KNOWN_AGENTS": "workflow,echo"})
    steps = [{"id": "a", "agent": "echo", "data": {}}]
    async with gateway.client() as client:
        refused = await client.post("/jobs", json={"agent": "workflow", "data": {"steps": steps}, "max_attempts": 2, "timeout_s": 5})
    # Then the 422 names each field (before: one entry for "body"), and says where the limits go
    assert refused.status_code == 422, refused.text
    details = refused.json()["error"]["details"]
    assert [d["field"] for d in details] == ["max_attempts", "timeout_s"], details
    assert all("data.timeout_s" in d["message"] for d in details), details


async def test_a_body_of_very_many_unknown_fields_is_refused_without_listing_them(client) -> None:  # type: ignore[no-untyped-def]
    body = {"agent": "echo", "data": {}, **{f"f{i}": 1 for i in range(100_000)}}
    response = await client.post("/jobs", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["message"] == "body: 100000 problems (unknown fields?); send the documented fields only"


@pytest.mark.parametrize("unknown, summed", [(99, False), (101, True)])
async def test_a_body_past_100_problems_is_told_how_many_in_one_entry(gateways: GatewayFactory, unknown: int, summed: bool) -> None:
    # Given a job body with ``unknown`` unknown fields
    gateway = await gateways.start()
    body = {"agent": "echo", "data": {}, **{f"x{i}": 1 for i in range(unknown)}}
    async with gateway.client() as client:
        answer = await client.post("/jobs", json=body)
    # Then it is 422; up to 100 problems each is an entry (20 shown), past that one entry says how many
    assert answer.status_code == 422, answer.text
    details = answer.json()["error"]["details"]
    if summed:
        assert [d["type"] for d in details] == ["too_many_problems"] and f"{unknown} problems" in details[0]["message"], details
    else:
        assert len(details) == 20 and {d["type"] for d in details} == {"extra_forbidden"}, details
