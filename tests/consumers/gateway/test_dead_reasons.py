"""The dead-letter reasons the gateway's ``?reason=`` and the CLI's ``--reason`` take: the one list,
``streams.dead.REASONS``. Before, the gateway spelt them out again in a Literal, so a reason added to the list was
refused over HTTP (422) and missing from the OpenAPI enum while the CLI took it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from streams import dead
from streams.envelope import MALFORMED_LETTER
from streams.keys import Keys
from tests.consumers.gateway import support
from tests.consumers.gateway.new_reason import NEW_REASON
from tests.consumers.gateway.support import GatewayFactory
from tests.consumers.test_cli import cli

KEYS = {"STREAMCREW_API_KEYS": "k-operator"}


async def _dead(redis, keys: Keys, reasons: list[str]) -> list[str]:  # type: ignore[no-untyped-def]
    """One dead letter of each reason (from the low lane, so it can go back); their job ids."""
    ids = []
    for reason in reasons:
        job_id = f"{reason}-{len(ids)}"
        await redis.xadd(keys.dead, {"id": job_id, "agent": "echo", "reason": reason, "error": "e", "source_stream": keys.lane("low"),
                                     "source_id": f"{len(ids) + 1}-0", "attempts": "1", "dead_at": "1",
                                     "request": json.dumps({"agent": "echo", "data": "{}"})})
        ids.append(job_id)
    return ids


def _reason_enums(schema: dict) -> dict[str, list[str]]:  # type: ignore[type-arg]
    """The OpenAPI enum of ``reason`` on each bulk dead-letter route."""
    found = {}
    for path, method in (("/dead", "delete"), ("/dead/replay", "post")):
        (param,) = [p for p in schema["paths"][path][method]["parameters"] if p["name"] == "reason"]
        found[f"{method.upper()} {path}"] = next(s["enum"] for s in param["schema"]["anyOf"] if "enum" in s)
    return found


async def test_every_reason_is_taken_over_http_and_an_unknown_one_is_a_422_naming_them(gateways: GatewayFactory, redis,  # type: ignore[no-untyped-def]
                                                                                       keys: Keys) -> None:
    # Given two dead letters of every reason
    replay_ids = await _dead(redis, keys, list(dead.REASONS))
    purge_ids = await _dead(redis, keys, list(dead.REASONS))
    gateway = await gateways.start(KEYS)
    async with gateway.client("k-operator") as client:
        # Then the OpenAPI enum of both routes is the list, in its order
        enums = _reason_enums((await client.get("/openapi.json")).json())
        assert enums == {"DELETE /dead": list(dead.REASONS), "POST /dead/replay": list(dead.REASONS)}
        # And each reason replays and purges its own letters; a malformed letter cannot go back: both are skipped, then purged
        for reason, replayed, purged in zip(dead.REASONS, replay_ids, purge_ids):
            answer = await client.post("/dead/replay", params={"reason": reason})
            if reason == MALFORMED_LETTER:
                assert (answer.status_code, answer.json()["replayed"], len(answer.json()["skipped"])) == (202, [], 2), answer.text
            else:
                assert (answer.status_code, answer.json()["replayed"]) == (202, [replayed]), (reason, answer.text)
            answer = await client.delete("/dead", params={"reason": reason})
            assert (answer.status_code, answer.json()) == (200, {"purged": 2 if reason == MALFORMED_LETTER else 1}), (reason, answer.text, purged)
        # And a reason no dead letter carries is a 422 that names the ones there are
        for path, method in (("/dead", client.delete), ("/dead/replay", client.post)):
            bad = await method(path, params={"reason": "bogus"})
            assert (bad.status_code, bad.json()["error"]["code"]) == (422, "invalid_request"), bad.text
            message = bad.json()["error"]["message"]
            assert message.startswith("reason: Input should be ") and all(f"'{r}'" in message for r in dead.REASONS), message
    assert await redis.xlen(keys.dead) == 0


async def test_every_reason_is_taken_by_the_cli_and_an_unknown_one_exits_2_naming_them(redis_url: str, prefix: str, redis,  # type: ignore[no-untyped-def]
                                                                                        keys: Keys) -> None:
    await _dead(redis, keys, list(dead.REASONS))
    for reason in dead.REASONS:
        done = cli(redis_url, prefix, "dead", "purge", "--yes", "--reason", reason)
        assert done.returncode == 0, (reason, done.stderr)
    assert await redis.xlen(keys.dead) == 0
    bad = cli(redis_url, prefix, "dead", "purge", "--yes", "--reason", "bogus")
    assert bad.returncode == 2
    assert " ".join(bad.stderr.split()) == f"--reason 'bogus' is not a dead-letter reason; use one of {', '.join(dead.REASONS)}", bad.stderr


async def test_a_reason_added_to_the_one_list_is_taken_by_the_gateway_and_the_cli(gateways: GatewayFactory, redis, keys: Keys,  # type: ignore[no-untyped-def]
                                                                                 redis_url: str, prefix: str,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # Given streams.dead.REASONS with one reason more (the CLI and the gateway run with it), and a letter of it
    new_reason_cmd = [sys.executable, "-m", "tests.consumers.gateway.new_reason"]
    monkeypatch.setattr(support, "gateway_cmd", lambda *args: [*new_reason_cmd, "gateway", *args])
    await _dead(redis, keys, [NEW_REASON, "invalid"])
    gateway = await gateways.start(KEYS)
    async with gateway.client("k-operator") as client:
        # Then the gateway lists it in its OpenAPI enum and takes it
        assert all(NEW_REASON in enum for enum in _reason_enums((await client.get("/openapi.json")).json()).values())
        answer = await client.delete("/dead", params={"reason": NEW_REASON})
        assert (answer.status_code, answer.json()) == (200, {"purged": 1}), answer.text
    # And so does the CLI
    await _dead(redis, keys, [NEW_REASON])
    done = subprocess.run([*new_reason_cmd, "dead", "purge", "--yes", "--reason", NEW_REASON, "--redis-url", redis_url, "--prefix", prefix],
                          capture_output=True, text=True, timeout=60, env={**os.environ})
    assert done.returncode == 0, done.stderr
    assert [f["reason"] for _, f in await redis.xrange(keys.dead)] == ["invalid"]
