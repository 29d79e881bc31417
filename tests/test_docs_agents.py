"""docs/agents.md and docs/llm.md: the generated reference is current, and the page's own agents run as written."""

import json
import random
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agents.llm import LLMClient, LLMSettings, LLMUnavailable
from consumers.agentdocs import call_seconds

ROOT = Path(__file__).resolve().parent.parent

# Imports the page's example modules (``# name.py`` blocks) from a directory and runs their agents
# the way the worker does, on the offline model; prints one JSON line per call.
RUNNER = """
import asyncio, importlib, json, sys
sys.path.insert(0, sys.argv[1])
from agents import AgentContext, default_registry, run_agent
from agents.llm import LLMSettings, configure
from streams.errors import Reject, RetryLater

configure(LLMSettings(base_url=None))
calls = json.loads(sys.argv[2])

async def main():
    for module, agent, data in calls:
        importlib.import_module(module)
        spec = default_registry.get(agent)
        ctx = AgentContext(job_id="doc-1", agent=agent, attempt=1, max_attempts=spec.max_attempts or 3)
        try:
            result, usage = await run_agent(spec, data, ctx, timeout_s=spec.timeout_s)
            out = {"result": result, "usage": usage}
        except Reject as exc:
            out = {"rejected": exc.reason}
        except RetryLater as exc:
            out = {"retry_in": exc.delay_s, "reason": exc.reason}
        print(json.dumps({"agent": agent, "timeout_s": spec.timeout_s, "max_attempts": spec.max_attempts, **out}))

asyncio.run(main())
"""


@pytest.mark.timeout(300)  # imports CrewAI and runs every built-in agent: 10 s idle, minutes on a loaded machine
def test_agents_and_prices_reference_is_generated_from_the_code() -> None:
    run = subprocess.run([sys.executable, "-m", "consumers.agentdocs", "--check"], cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert run.returncode == 0, run.stderr[-3000:]


@pytest.mark.timeout(300)
def test_the_pages_own_agents_run_as_written(tmp_path: Path) -> None:
    text = (ROOT / "docs" / "agents.md").read_text()
    modules = dict((name, code) for code, name in re.findall(r"```python\n(# (\w+)\.py.*?)```", text, re.DOTALL))
    assert set(modules) == {"triage", "summarise", "crews"}, sorted(modules)
    for name, code in modules.items():
        (tmp_path / f"{name}.py").write_text(code)
    calls = [
        ["triage", "triage", {"text": "I want a refund", "customer_id": "CUS-001"}],
        ["triage", "triage", {"text": "my lawyer will call", "customer_id": "CUS-001"}],
        ["triage", "triage", {"text": "hello", "customer_id": "CUS-LOCKED"}],
        ["summarise", "summarise", {"text": "Redis streams keep an append-only log of entries."}],
        ["crews", "tagline", {"topic": "rain jackets"}],
    ]
    run = subprocess.run([sys.executable, "-c", RUNNER, str(tmp_path), json.dumps(calls)], cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert run.returncode == 0, run.stderr[-3000:]
    refund, lawyer, locked, summary, tagline = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert refund["result"] == {"queue": "billing", "job": "doc-1", "attempt": 1}
    assert (refund["timeout_s"], refund["max_attempts"]) == (120, 5)
    assert lawyer["rejected"] == "legal matters are not handled here"
    assert (locked["retry_in"], locked["reason"]) == (30, "customer record locked")
    assert summary["result"]["summary"] and summary["usage"]["offline"] is True
    assert tagline["result"]["tagline"] and tagline["usage"]["prompt_tokens"] > 0


class _MidJitter(random.Random):
    """Jitter factor exactly 1.0 (the client draws 0.5 + random())."""

    def random(self) -> float:
        return 0.5


@pytest.mark.parametrize(("max_retries", "budget_s"), [(4, 30.0), (20, 1.0)], ids=["tries-run-out", "budget-runs-out"])
async def test_the_worst_case_table_replays_the_clients_retry_loop(max_retries: int, budget_s: float) -> None:
    """docs/llm.md's worst case comes from ``call_seconds``; it must give up where the real client does."""
    with socket.socket() as s:  # a port with nothing listening: every try is refused at once
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = LLMSettings(base_url=f"http://127.0.0.1:{port}/v1", max_retries=max_retries, retry_budget_s=budget_s,
                           backoff_s=0.05, max_backoff_s=0.4)
    predicted_s, predicted_tries = call_seconds(settings, 0.0)
    client = LLMClient(settings, rng=_MidJitter())
    started = time.monotonic()
    try:
        with pytest.raises(LLMUnavailable, match=rf"gave up after {predicted_tries} attempt\(s\)"):
            await client.chat([{"role": "user", "content": "hi"}])
    finally:
        await client.aclose()
    assert time.monotonic() - started >= predicted_s * 0.95
