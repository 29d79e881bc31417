"""`streamcrew demo` end to end on a small burst: its report's invariants hold and --json parses."""

import json
import os
import subprocess

from consumers.processes import streamcrew_cmd


def test_demo_json_report_holds_its_invariants(redis_url: str, prefix: str) -> None:
    # Given the demo against the test Redis (so it needs no embedded one), offline LLM, chaos on
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMCREW_LLM_")}
    done = subprocess.run(streamcrew_cmd("demo", "--requests", "120", "--rate", "0", "--json", "--redis-url", redis_url, "--prefix", prefix),
                          capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    # Then every request yields exactly one result, and every result reached the webhook receiver, verified
    assert report["ok"] is True
    assert (report["requests"], report["results"], report["lost"], report["duplicated"]) == (120, 120, 0, 0)
    assert report["webhooks"]["jobs"] == 120 and report["webhooks"]["bad_signatures"] == 0
    # And the malformed events were rejected and dead-lettered, the flaky ones retried
    assert report["statuses"].get("rejected", 0) >= 1
    assert report["dead_letters"] >= report["statuses"].get("rejected", 0)
    assert report["retries"] >= 1
    assert report["workflows"]["sent"] >= 1 and report["workflows"].get("completed") == report["workflows"]["sent"]
    assert report["workflows"]["steps"] == 5 * report["workflows"]["sent"] and report["workflows"]["steps_duplicated"] == 0
    assert "SIGKILL" in report["chaos"]
    # And the crews answered through the offline model, with usage on every LLM result
    assert report["offline"] is True
    assert len(report["samples"]) == 3
    assert all(s["usage"]["prompt_tokens"] > 0 for s in report["samples"])
    assert sum(report["tokens"].values()) > 0


def test_demo_on_four_partitions_loses_and_duplicates_nothing(redis_url: str, prefix: str) -> None:
    # Given the demo with STREAMCREW_PARTITIONS=4: every process, the producer and the malformed raw XADDs place by id
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("STREAMCREW_LLM_")}, "STREAMCREW_PARTITIONS": "4"}
    done = subprocess.run(streamcrew_cmd("demo", "--requests", "50", "--rate", "0", "--json", "--redis-url", redis_url, "--prefix", prefix),
                          capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    # Then every request yields exactly one result, read from every partition's results stream, through a worker's SIGKILL
    assert (report["ok"], report["requests"], report["results"], report["lost"], report["duplicated"]) == (True, 50, 50, 0, 0)
    assert report["statuses"].get("rejected", 0) >= 1 and report["dead_letters"] >= 1
    assert "SIGKILL" in report["chaos"]
