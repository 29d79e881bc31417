"""Workflows from every producer: the CLI with live step progress, the gateway (POST, GET with steps, SSE)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.consumers.gateway.support import GatewayFactory, sse_events
from tests.consumers.test_cli import cli
from tests.support import WorkerFactory
from tests.workflows.support import start_workers

GRAPH = {
    "steps": [
        {"id": "reviews", "agent": "echo", "data": {"sku": "SKU-1001"}},
        {"id": "pricing", "agent": "echo", "data": {"sku": "SKU-1001"}},
        {"id": "sentiment", "agent": "echo", "data": {"sleep_s": 0.2}, "after": ["reviews"]},
        {"id": "recommend", "agent": "echo", "data": {"sleep_s": 0.2}, "after": ["pricing", "sentiment"]},
    ],
}


def test_cli_submits_a_workflow_from_a_file_and_shows_step_progress(redis_url: str, prefix: str, workers: WorkerFactory, tmp_path: Path) -> None:
    start_workers(workers, 1, "--concurrency", "4")
    graph = tmp_path / "wf.json"
    graph.write_text(json.dumps(GRAPH))
    done = cli(redis_url, prefix, "submit", "workflow", "--data", f"@{graph}", "--id", "wf-cli", "--wait", "--timeout", "60")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["id"], result["status"]) == ("wf-cli", "completed")
    assert result["result"]["summary"] == "4 of 4 steps completed"
    # stderr shows each step reaching completed, and the count of settled steps
    lines = done.stderr.splitlines()
    for sid in ("reviews", "pricing", "sentiment", "recommend"):
        assert any(sid in line and line.rstrip().endswith("completed") for line in lines), done.stderr
    assert any(line.startswith("4/4") for line in lines), done.stderr


# The same graph with 1 s steps after the first two: the event stream polls every 0.1 s at most, so it sees
# each progress state even when a loaded machine holds the gateway back for a few hundred milliseconds.
SLOW_GRAPH = {"steps": [{**s, "data": {"sleep_s": 1.0}} if "sleep_s" in s["data"] else s for s in GRAPH["steps"]]}


async def test_gateway_runs_a_workflow_and_lists_its_steps(gateways: GatewayFactory, workers: WorkerFactory) -> None:
    gateway = await gateways.start()
    async with gateway.client() as client:
        # Given a workflow posted before any worker runs
        posted = await client.post("/jobs", json={"agent": "workflow", "data": SLOW_GRAPH, "id": "wf-http"})
        assert posted.status_code == 202, posted.text
        queued = (await client.get("/jobs/wf-http")).json()
        assert queued["status"] == "queued"
        start_workers(workers, 1, "--concurrency", "4")
        # When it runs, its events show step progress until it completes
        seen: list[str] = []
        async with sse_events(client, "/jobs/wf-http/events") as events:
            async for event in events:
                seen.append(event["id"])
                if json.loads(event["data"])["status"] == "completed":
                    break
        assert seen[-1] == "1-completed-4"
        assert len({s for s in seen if s.startswith("1-running-")}) >= 2, seen  # at least two progress states
        # Then GET /jobs/{id} lists every step with its status and job id
        record = (await client.get("/jobs/wf-http")).json()
        assert record["steps_total"] == 4 and record["steps_done"] == 4
        assert [(s["id"], s["status"], s["job_id"]) for s in record["steps"]] == [
            (sid, "completed", f"wf-http::{sid}") for sid in ("reviews", "pricing", "sentiment", "recommend")]
        step = (await client.get("/jobs/wf-http::sentiment")).json()
        assert (step["parent"], step["step"], step["status"]) == ("wf-http", "sentiment", "completed")
        result = (await client.get("/jobs/wf-http/result")).json()
        assert result["result"]["steps"]["recommend"]["result"]["inputs"]["sentiment"]["echo"] == {"sleep_s": 1.0}
        # and a repeated POST of the id is the same job
        again = await client.post("/jobs", json={"agent": "workflow", "data": SLOW_GRAPH, "id": "wf-http"})
        assert again.status_code == 200 and again.json()["status"] == "completed"
