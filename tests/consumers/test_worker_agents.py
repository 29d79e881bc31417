"""``streamcrew worker --agents``: every name the contract offers is accepted, an unknown one is named with the choices."""

from __future__ import annotations

import json
import subprocess

from consumers.processes import streamcrew_cmd
from streams.keys import Keys
from tests.support import WorkerFactory, wait_results

WORKFLOW = {"steps": [{"id": "a", "agent": "echo", "data": {"n": 1}}, {"id": "b", "agent": "echo", "data": {}, "after": ["a"]}]}


async def test_a_worker_told_to_serve_workflow_runs_workflows(redis, keys: Keys, producer, workers: WorkerFactory) -> None:
    # Given a worker started with --agents echo,workflow (workflow is a built-in agent, contract §9)
    worker = workers.start("--agents", "echo,workflow")
    assert worker.alive()
    # When a workflow of echo steps is published
    await producer.publish("workflow", WORKFLOW, id="wf-named")
    # Then the steps and the workflow complete
    done = {r.id: r for r in await wait_results(redis, keys, 3, timeout=30)}
    assert done["wf-named"].status == "completed", done["wf-named"]
    assert {done["wf-named::a"].status, done["wf-named::b"].status} == {"completed"}


def test_an_unknown_agent_name_lists_the_agents_it_could_serve(redis_url: str, prefix: str) -> None:
    # Given a typo in --agents; When the worker starts
    run = subprocess.run(streamcrew_cmd("worker", "--agents", "echo,ordr", "--redis-url", redis_url, "--prefix", prefix),
                         capture_output=True, text=True, timeout=60)
    # Then it refuses at once, in one line that names the bad name and what it could serve, crews included
    assert run.returncode != 0
    line = run.stderr.strip()
    assert "\n" not in line and "Traceback" not in line, run.stderr
    assert "unknown agent 'ordr'" in line and "order" in line.split("known:")[1] and "workflow" in line, line


def test_an_app_module_that_does_not_import_is_one_line(redis_url: str, prefix: str) -> None:
    # Given an --app name with brackets in it (rich markup to the error console)
    run = subprocess.run(streamcrew_cmd("worker", "--app", "my[/app]", "--redis-url", redis_url, "--prefix", prefix),
                         capture_output=True, text=True, timeout=60)
    # Then the worker refuses in one line that names it as given, not with a MarkupError traceback
    assert run.returncode == 2, run.stderr
    assert run.stderr.strip() == "cannot load agents: No module named 'my[/app]'", run.stderr


def test_a_design_name_alone_is_enough(redis_url: str, prefix: str, tmp_path) -> None:
    # Given a worker that serves only the first design's name for the order crew
    workers = WorkerFactory(redis_url, prefix, tmp_path)
    try:
        # When it starts; Then it serves that name (not "unknown agent"), whether CrewAI is installed or not
        worker = workers.start("--agents", "order_processing")
        assert "agents=order_processing " in worker.log_text(), worker.log_text()[-2000:]
    finally:
        workers.close()


async def test_a_job_for_an_agent_the_worker_lacks_says_how_to_split_pools(redis, keys: Keys, producer, workers: WorkerFactory) -> None:
    # Given a worker limited to echo; When a job for ask reaches it
    workers.start("--agents", "echo")
    await producer.publish("ask", {"prompt": "hi"}, id="not-here")
    # Then it is rejected with a reason that says workers of one prefix must serve the same agents
    (result,) = await wait_results(redis, keys, 1, timeout=30)
    assert result.status == "rejected"
    assert "this worker serves: echo" in (result.error or "") and "same agents" in (result.error or ""), json.dumps(result.error)
