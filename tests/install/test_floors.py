"""The lowest releases pyproject.toml allows still run streamcrew: a floor nobody tried is a guess.

Builds a venv holding every base dependency to its floor's release series (``name==X.*`` for
``name>=X``), installs the package there, and runs in it the tests that met the floor bugs found so
far (2026-12-04: redis-py 5.0 had no ``aclose``; redis-py 5 - 7 speak RESP2, where HELLO's reply read
as nothing and a user without INFO could not start a worker; aiodns 3, pydantic-settings 2.3,
typer 0.12 and standardwebhooks 1.0 failed to import or to start; 2026-12-05: typer 0.13 - 0.15 crashed printing a usage error with click 8.2+;
2026-12-07: on Redis Cluster, a redis-py before 8.2 never found a moved cluster again, now refused in one line). The CrewAI and Kafka floors
(crewai 1.14.5, faust-streaming 0.11.0) were checked by hand the same day: README, Install.
"""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
import venv
from pathlib import Path

import pytest

from tests.support import package_source

ROOT = Path(__file__).resolve().parents[2]
FLOOR = re.compile(r"^([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?>=([0-9][0-9.]*)$")
# Each met a floor bug: the worker, CLI and gateway as a least-privilege user (HELLO over RESP2), the
# notifier's resolver (aiodns), the CLI's options and errors (typer, redis-py's URL parsing), the core.
FLOOR_TESTS = [
    "tests/streams/test_server_facts.py",
    "tests/streams/test_exactly_once.py",
    "tests/consumers/test_acl_user.py",
    "tests/consumers/notifier/test_dns.py",
    "tests/consumers/test_cli.py",
    "tests/cluster/test_redis_py_floor.py",
    # 2026-12-07: what leans on a library's internals: uvicorn's httptools protocol (request heads bounded), aiohttp's
    # connector protocol (stray answers, interim answers) in the notifier and the LLM client
    "tests/consumers/gateway/test_request_heads.py",
    "tests/consumers/notifier/test_hostile_receivers.py",
    "tests/agents/test_llm_hostile.py",
]


def floor_constraints() -> list[str]:
    """``name==X.*`` for every base dependency declared ``name>=X`` (environment markers kept)."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = []
    for line in declared:
        requirement, _, marker = line.partition(";")
        found = FLOOR.match(requirement.strip())
        assert found, f"not a 'name>=X' floor: {line!r}"
        pins.append(f"{found[1]}=={found[2]}.*" + (f"; {marker.strip()}" if marker else ""))
    return pins


def test_every_base_dependency_has_a_floor() -> None:
    pins = floor_constraints()
    assert "redis==5.0.1.*" in pins and any(p.startswith("aiodns==4.0.*") for p in pins), pins


@pytest.mark.slow
@pytest.mark.timeout(1600)  # its own steps are bounded (900 + 60 + 600 s); ~1 min idle, over 120 s on a loaded run
def test_the_floors_pass_the_tests_that_met_floor_bugs(redis_url: str, tmp_path: Path) -> None:
    # Given a venv with every base dependency at its floor's series, and the test tools
    where = tmp_path / "floors"
    venv.create(where, with_pip=True)
    python = str(where / "bin" / "python")
    constraints = tmp_path / "floors.txt"
    constraints.write_text("\n".join(floor_constraints()) + "\n")
    pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    source = package_source(tmp_path / "source")
    done = subprocess.run([*pip, "-c", str(constraints), str(source), "pytest", "pytest-asyncio", "pytest-timeout", "psutil"],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"installing at the floors failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    held = subprocess.run([python, "-c", "import redis; print(redis.__version__)"], capture_output=True, text=True, timeout=60)
    assert held.stdout.split() == ["5.0.1"], f"not at the floors: {held.stdout} {held.stderr}"
    # Then the tests that met each floor bug pass there, against this suite's Redis
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "STREAMCREW_TEST_REDIS_URL": redis_url}
    run = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *FLOOR_TESTS],
                         capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert run.returncode == 0, f"at the floors:\n{run.stdout[-4000:]}\n{run.stderr[-2000:]}"
    assert " passed" in run.stdout.splitlines()[-1], run.stdout[-500:]
