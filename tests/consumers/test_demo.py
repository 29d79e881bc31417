"""`streamcrew demo` end to end on a small burst: its report's invariants hold, --json parses, and no Redis password is shown."""

import json
import os
import subprocess
from collections.abc import Iterator

import pytest
import redis as sync_redis

from consumers.processes import streamcrew_cmd
from streams.embedded import RedisServer

PASSWORD = "s3cretPW"


@pytest.fixture
def password_redis_url(own_redis: RedisServer) -> Iterator[str]:
    """A Redis of its own that asks for ``PASSWORD`` (the session's asks for none)."""
    with sync_redis.Redis(port=own_redis.port) as client:
        client.config_set("requirepass", PASSWORD)
    yield f"redis://:{PASSWORD}@127.0.0.1:{own_redis.port}/0"


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


@pytest.mark.parametrize("as_json", [True, False])
def test_demo_never_prints_the_redis_password(password_redis_url: str, prefix: str, as_json: bool) -> None:
    # Given the demo against a Redis whose URL holds a password (the banner goes to stderr, the --json report to stdout)
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMCREW_LLM_")}
    args = ["--requests", "10", "--rate", "0", "--no-chaos", "--redis-url", password_redis_url, "--prefix", prefix, *(["--json"] if as_json else [])]
    done = subprocess.run(streamcrew_cmd("demo", *args), capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    # Then it ran there, and names the Redis without its password
    assert PASSWORD not in done.stdout and PASSWORD not in done.stderr
    shown = password_redis_url.replace(f":{PASSWORD}@", "")
    if as_json:
        assert json.loads(done.stdout)["redis"] == shown
    else:
        assert f"Redis at {shown} " in " ".join(done.stderr.split())
