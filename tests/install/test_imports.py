"""CrewAI (a ~3 s import) is loaded only by a worker that serves a crew (issue 11 §1).

Each check runs in a fresh interpreter and reads its ``sys.modules``: the
notifier, gateway, CLI and mock-llm, and a worker limited to non-crew agents,
never import ``crewai``, even in this environment where it is installed.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

ROOT_CHECK = """
import sys
{body}
loaded = sorted(m for m in ("crewai", "agents.crews") if m in sys.modules)
print(",".join(loaded) or "none")
"""


def _loaded(body: str) -> str:
    code = ROOT_CHECK.format(body=textwrap.dedent(body))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("body", [
    pytest.param("import consumers.cli\nfrom typer.testing import CliRunner\nCliRunner().invoke(consumers.cli.app, ['--help'])", id="cli"),
    pytest.param("from consumers.gateway import GatewaySettings\nfrom consumers.gateway.app import create_app\n"
                 "create_app(GatewaySettings())", id="gateway"),
    pytest.param("from consumers.notifier import NotifierSettings, run_notifier\nimport consumers.notifier.app", id="notifier"),
    pytest.param("import consumers.mock_llm", id="mock-llm"),
    pytest.param("from consumers.settings import WorkerSettings\nfrom consumers.worker import load_registry\n"
                 "r = load_registry(WorkerSettings(agents=['echo', 'ask']))\nassert r.names() == ['ask', 'echo'], r.names()",
                 id="worker --agents echo,ask"),
])
def test_never_imports_crewai(body: str) -> None:
    assert _loaded(body) == "none"


def test_a_worker_serving_a_crew_imports_crewai() -> None:
    """The other side of the check above: it can fail."""
    loaded = _loaded("from consumers.settings import WorkerSettings\nfrom consumers.worker import load_registry\n"
                     "load_registry(WorkerSettings(agents=['echo', 'order']))")
    assert loaded == "agents.crews,crewai"
