"""promtool accepts our alert rules, our Prometheus config, and a real worker's /metrics exposition."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx

from tests.deploy.conftest import MetricsWorker
from tests.deploy.support import ALERTS, PROMETHEUS_CONFIG


def _run(args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=60, check=False)


def test_promtool_accepts_the_alert_rules(promtool: str) -> None:
    # When promtool checks the rules file
    done = _run([promtool, "check", "rules", str(ALERTS)])
    # Then it finds no error
    assert done.returncode == 0, f"promtool check rules:\n{done.stdout}\n{done.stderr}"
    assert "SUCCESS" in done.stdout


def test_promtool_accepts_the_prometheus_config(promtool: str) -> None:
    # When promtool checks the compose stack's Prometheus config (and the rule files it names)
    done = _run([promtool, "check", "config", str(PROMETHEUS_CONFIG)])
    # Then it finds no error
    assert done.returncode == 0, f"promtool check config:\n{done.stdout}\n{done.stderr}"


async def test_promtool_accepts_a_running_workers_metrics(promtool: str, metrics_worker: MetricsWorker) -> None:
    # Given the /metrics text of a worker that ran jobs, with the stream gauges
    async with httpx.AsyncClient() as client:
        response = await client.get(metrics_worker.url)
    assert response.status_code == 200
    text = response.text
    assert "streamcrew_jobs_total" in text and "streamcrew_group_pending" in text
    # When promtool lints it
    done = _run([promtool, "check", "metrics"], stdin=text)
    # Then it reports nothing: no error, no lint problem
    report = (done.stdout + done.stderr).strip()
    assert done.returncode == 0 and not report, f"promtool check metrics (exit {done.returncode}):\n{report}"


def test_promtool_unit_tests_of_the_alert_rules(promtool: str) -> None:
    # When promtool runs the rule unit tests (StreamcrewResultsDropped fires on results cut unread, and clears;
    # StreamcrewNoWorkers stays quiet while a saturated worker starves a lane, and fires once no worker is live;
    # StreamcrewNoNotifier stays quiet while a notifier busy with due retries delivers, and fires once it is dead)
    done = _run([promtool, "test", "rules", str(Path(__file__).with_name("alerts_test.yml"))])
    # Then they pass
    assert done.returncode == 0, f"promtool test rules:\n{done.stdout}\n{done.stderr}"
