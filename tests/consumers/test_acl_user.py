"""streamcrew runs as a least-privilege Redis ACL user: its prefix's keys, no channels, nothing ``@dangerous`` (no INFO)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.consumers.gateway.support import GatewayFactory
from tests.consumers.test_cli import cli
from tests.support import ACL_PASSWORD as PASSWORD, WorkerFactory


async def test_every_process_runs_as_a_user_of_the_prefix_only(acl_user, prefix: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # Given a Redis user with only the prefix's keys and no @dangerous command (INFO among them)
    url = acl_user(f"{prefix}:*")
    workers = WorkerFactory(url, prefix, tmp_path)
    gateways = GatewayFactory(url, prefix, tmp_path)
    try:
        # Then a worker starts and runs a job the CLI submits and waits for
        workers.start()
        done = cli(url, prefix, "submit", "echo", "--data", '{"acl": 1}', "--wait", "--timeout", "20")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["status"] == "completed"
        stats = cli(url, prefix, "stats", "--json")
        assert stats.returncode == 0 and json.loads(stats.stdout)["prefix"] == prefix, stats.stderr
        # And the gateway serves, its stream gauges included
        gateway = await gateways.start()
        async with gateway.client() as client:
            assert (await client.get("/readyz")).status_code == 200
            assert (await client.get("/queue/stats")).status_code == 200
            metrics = (await client.get("/metrics")).text
        assert "streamcrew_stream_length{" in metrics, metrics[:500]
        assert "stream gauges: Redis unavailable" not in gateway.child.log_text()
        assert PASSWORD not in gateway.child.log_text()
    finally:
        gateways.close()
        workers.close()


def test_a_user_without_the_prefixs_keys_gets_one_line(acl_user, prefix: str) -> None:  # type: ignore[no-untyped-def]
    url = acl_user("someone-else:*")
    done = cli(url, prefix, "stats", "--json")
    assert done.returncode == 4, (done.stdout, done.stderr)
    assert "Redis refused a command" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert PASSWORD not in done.stderr
