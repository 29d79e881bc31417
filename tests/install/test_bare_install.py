"""The bare ``pip install streamcrew`` (no extras) runs a worker end to end (issue 11 §1).

Builds a fresh venv with ``pip install <repo>`` (no CrewAI, no test tools; pip's
cache keeps it to a few seconds after the first run), starts that venv's
``streamcrew worker`` against the suite's Redis, and checks: it starts, says in
one line which agents need ``streamcrew[crewai]``, completes an ``echo`` job,
ends a crew job ``rejected`` with the same advice; the demo (crews) says so too.
"""

from __future__ import annotations

import os
import subprocess
import venv
from pathlib import Path

import pytest

from consumers.processes import Child
from streams.keys import Keys
from streams.embedded import free_port
from streams.producer import Producer
from tests.support import package_source, wait_for_log, wait_serving, wait_until

EXTRA = "pip install 'streamcrew[crewai]'"


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("bare") / "venv"
    venv.create(where, with_pip=True)
    python = where / "bin" / "python"
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                           str(package_source(where.parent / "source"))],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"pip install of the bare package failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    check = subprocess.run([str(python), "-c", "import importlib.util as u; print(u.find_spec('crewai'), u.find_spec('pytest'))"],
                           capture_output=True, text=True, timeout=60)
    assert check.stdout.split() == ["None", "None"], f"not a bare install: {check.stdout} {check.stderr}"
    return where


@pytest.mark.slow
async def test_bare_install_worker_serves_echo_and_explains_crews(
    bare_venv: Path, redis_url: str, prefix: str, redis: object, keys: Keys, tmp_path: Path,
) -> None:
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
           "STREAMCREW_REDIS_URL": redis_url, "STREAMCREW_PREFIX": prefix, "STREAMCREW_METRICS_PORT": "0"}
    # Run from tmp_path so the repo's own packages cannot shadow the installed ones.
    worker = Child([str(bare_venv / "bin" / "streamcrew"), "worker", "--concurrency", "4"], env=env, log_path=tmp_path / "worker.log",
                   cwd=tmp_path, repo_on_path=False)
    try:
        wait_for_log(worker, " ready: ", timeout=60)
        lines = [line for line in worker.log_text().splitlines() if EXTRA in line]
        assert len(lines) == 1 and "order,product,returns,support" in lines[0], worker.log_text()
        producer = Producer(redis, keys)  # type: ignore[arg-type]
        await producer.publish("echo", {"hello": "bare"}, id="bare-echo")
        await producer.publish("order", {"order_id": "ORD-12345"}, id="bare-order")
        await producer.publish("order_processing", {"order_id": "ORD-12345"}, id="bare-design-order")  # the first design's name

        async def all_ended() -> bool:
            return int(await redis.xlen(keys.results)) >= 3  # type: ignore[attr-defined]

        await wait_until(all_ended, timeout=30, what="the echo and the two order results")
        ended = {f["id"]: f for _, f in await redis.xrange(keys.results)}  # type: ignore[attr-defined]
        assert ended["bare-echo"]["status"] == "completed", ended
        assert '"hello":"bare"' in ended["bare-echo"]["result"]
        assert ended["bare-order"]["status"] == "rejected"
        assert EXTRA in ended["bare-order"]["error"]
        assert ended["bare-design-order"]["status"] == "rejected"
        assert EXTRA in ended["bare-design-order"]["error"], ended["bare-design-order"]["error"]
        assert worker.alive()
    finally:
        worker.stop()
    # And the demo, which runs the crews, says what to install instead of failing half-way
    demo = subprocess.run([str(bare_venv / "bin" / "streamcrew"), "demo", "--requests", "1"], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path, env=env)
    assert demo.returncode == 2 and EXTRA in " ".join(demo.stderr.split()), demo.stderr


@pytest.mark.slow
async def test_bare_install_serves_mock_llm(bare_venv: Path, tmp_path: Path) -> None:
    # Given the bare install's `streamcrew mock-llm` (the README lists it in the bare install)
    port = free_port()
    mock = Child([str(bare_venv / "bin" / "streamcrew"), "mock-llm", "--port", str(port)], log_path=tmp_path / "mock.log",
                 cwd=tmp_path, repo_on_path=False)
    try:
        # Then it serves (it asks uvicorn for httptools: a base dependency), and it is what answers: it holds the port
        wait_for_log(mock, f"STREAMCREW_LLM_BASE_URL=http://127.0.0.1:{port}/v1", timeout=30)
        await wait_serving(mock, f"http://127.0.0.1:{port}/healthz", timeout=30, what="the bare install's mock-llm to answer /healthz")
    finally:
        mock.stop()
