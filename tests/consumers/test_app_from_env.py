"""``STREAMCREW_APP`` and ``STREAMCREW_AGENTS`` read as the docs write them: ``a,b`` (a JSON list works too)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from streams.keys import Keys
from tests.support import WorkerFactory, wait_results

MODULE = '''
from agents import agent


@agent("{name}")
async def run(data: dict) -> dict:
    return {{"by": "{name}"}}
'''


@pytest.mark.parametrize("form", ["commas", "json"])
async def test_worker_imports_the_modules_named_in_the_environment(
    redis, keys: Keys, producer, redis_url: str, prefix: str, tmp_path: Path, form: str,
) -> None:
    # Given two agent modules, named to the worker only through STREAMCREW_APP (and served through STREAMCREW_AGENTS)
    for name in ("env_agent_a", "env_agent_b"):
        (tmp_path / f"{name}.py").write_text(MODULE.format(name=name))
    names = ["env_agent_a", "env_agent_b"]
    value = ",".join(names) if form == "commas" else '["env_agent_a", "env_agent_b"]'
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH", "")) if p)
    workers = WorkerFactory(redis_url, prefix, tmp_path)
    try:
        # When the worker starts
        worker = workers.start(env={"STREAMCREW_APP": value, "STREAMCREW_AGENTS": ",".join(names), "PYTHONPATH": path})
        assert "agents=env_agent_a,env_agent_b " in worker.log_text(), worker.log_text()[-2000:]
        # Then it runs both agents' jobs
        await producer.publish("env_agent_a", {}, id="by-a")
        await producer.publish("env_agent_b", {}, id="by-b")
        got = {r.id: r for r in await wait_results(redis, keys, 2, timeout=20)}
        assert {i: (r.status, r.result) for i, r in got.items()} == {
            "by-a": ("completed", {"by": "env_agent_a"}), "by-b": ("completed", {"by": "env_agent_b"})}
    finally:
        workers.close()
