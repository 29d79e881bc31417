"""A workflow's steps are listed from one HMGET of their fields, then the records of the steps it published alone: two
commands a step made a 1,000-step workflow's read ~40 ms of replies to parse."""

from __future__ import annotations

import orjson

from streams.connection import connect
from streams.embedded import RedisServer
from streams.keys import Keys
from streams.workflow import step_job_id
from streams.workflows import get_steps

STEPS = 200


async def test_steps_are_read_in_a_few_commands_whatever_their_count(own_redis: RedisServer, keys: Keys) -> None:
    # Given a workflow of 200 steps: the first two published (one running, one whose record is gone), one failed with
    # its error, one skipped with an error left from before, the rest pending
    redis = connect(own_redis.url)
    try:
        ids = [f"s{i:03d}" for i in range(STEPS)]
        states = {"s000": "queued", "s001": "queued", "s002": "failed", "s003": "skipped"}
        fields = {"order": orjson.dumps(ids).decode(), "s002|err": "boom", "s003|err": "upstream failed"}
        for sid in ids:
            fields[f"{sid}|st"] = states.get(sid, "pending")
            fields[f"{sid}|agent"] = "echo"
        await redis.hset(keys.workflow("wf"), mapping=fields)
        await redis.hset(keys.job(step_job_id("wf", "s000")), "status", "running")
        before = await redis.info("commandstats")

        # When its steps are listed
        steps = await get_steps(redis, keys, "wf")

        # Then each shows its status (a published step's own record's, while it has one) and error
        assert steps is not None and len(steps) == STEPS
        assert steps[:5] == [
            {"id": "s000", "agent": "echo", "status": "running", "job_id": "wf::s000"},
            {"id": "s001", "agent": "echo", "status": "queued", "job_id": "wf::s001"},
            {"id": "s002", "agent": "echo", "status": "failed", "job_id": "wf::s002", "error": "boom"},
            {"id": "s003", "agent": "echo", "status": "skipped", "job_id": "wf::s003", "error": "upstream failed"},
            {"id": "s004", "agent": "echo", "status": "pending", "job_id": "wf::s004"},
        ]
        # And the read took the order, one HMGET, and the two published steps' records: not two commands a step
        after = await redis.info("commandstats")
        calls = {name: int(after.get(f"cmdstat_{name}", {}).get("calls", 0)) - int(before.get(f"cmdstat_{name}", {}).get("calls", 0))
                 for name in ("hget", "hmget")}
        assert calls == {"hget": 3, "hmget": 1}, calls
        # And a workflow without steps lists none, an unknown one None
        await redis.hset(keys.workflow("empty"), "order", "[]")
        assert await get_steps(redis, keys, "empty") == []
        assert await get_steps(redis, keys, "unknown") is None
    finally:
        await redis.aclose()
