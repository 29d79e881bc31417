"""An agent output JSON cannot hold (an integer beyond 64 bits, an object no encoder knows) ends its job ``failed``
at once, dead letter ``unencodable``: each retry would run the agent again, pay for its calls, and fail the same way."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from streams.dead import list_dead
from streams.keys import Keys
from tests.support import WorkerFactory, wait_results

MODULE = '''
from pathlib import Path

from agents import agent

OUTPUTS = {{"wide": {{"n": 2**70}}, "opaque": {{"when": object()}}}}


@agent("bad_output")
async def run(data: dict) -> dict:
    with open({runs!r}, "a") as runs:  # one line per run: the test counts them
        runs.write(data["kind"] + "\\n")
    return OUTPUTS[data["kind"]]
'''


@pytest.mark.parametrize(("kind", "why"), [("wide", "Integer exceeds 64-bit range"), ("opaque", "Type is not JSON serializable: object")])
async def test_an_output_json_cannot_hold_fails_the_job_at_once(
    redis, keys: Keys, producer, redis_url: str, prefix: str, tmp_path: Path, kind: str, why: str,
) -> None:
    # Given a worker serving an async agent whose output JSON cannot hold
    runs = tmp_path / "runs.txt"
    (tmp_path / "bad_output_app.py").write_text(MODULE.format(runs=str(runs)))
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH", "")) if p)
    workers = WorkerFactory(redis_url, prefix, tmp_path)
    try:
        workers.start("--app", "bad_output_app", "--agents", "bad_output", env={"PYTHONPATH": path})
        # When a job allowed three attempts runs it
        await producer.publish("bad_output", {"kind": kind}, id=f"bad-{kind}", max_attempts=3)
        (result,) = await wait_results(redis, keys, 1, timeout=20)
    finally:
        workers.close()
    # Then it ran once and ended failed, its error saying the output could not be encoded as JSON, and why
    assert runs.read_text().splitlines() == [kind]
    assert (result.id, result.status.value, result.attempts) == (f"bad-{kind}", "failed", 1)
    assert result.error == f"the agent's output (dict) could not be encoded as JSON: {why}; not retried", result.error
    # And it was dead-lettered as failed jobs are, under a reason of its own
    (letter,) = await list_dead(redis, keys)
    assert (letter.id, letter.reason, letter.error, letter.attempts) == (f"bad-{kind}", "unencodable", result.error, 1)
    assert await redis.hget(keys.job(f"bad-{kind}"), "status") == "failed"
