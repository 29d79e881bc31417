"""The worker's /metrics figures match the jobs it ran; where /metrics listens."""

from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

import tests.support
from streams.embedded import free_port
from streams.envelope import JobRequest
from streams.keys import Keys
from tests.support import wait_results, wait_until


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


async def test_metrics_match_the_jobs_run(redis, keys: Keys, producer, workers) -> None:
    # Given a worker exporting metrics, and 30 good, 5 flaky (one retry), 2 hopeless and 3 malformed jobs
    _, port = workers.start_serving_metrics("--concurrency", "20")
    await producer.publish_many([JobRequest(agent="echo", data={"i": i}) for i in range(30)], priority="high")
    await producer.publish_many([JobRequest(agent="echo", data={"fail_first": 1}, id=f"flaky-{i}") for i in range(5)])
    await producer.publish_many([JobRequest(agent="echo", data={"fail_first": 9}, id=f"dead-{i}", max_attempts=2) for i in range(2)], priority="low")
    for i in range(3):
        await redis.xadd(keys.lane("low"), {"agent": "echo", "data": "not json", "id": f"bad-{i}"})
    await wait_results(redis, keys, 40, timeout=30)

    async def scraped() -> dict:
        async with httpx.AsyncClient() as client:
            return _samples((await client.get(f"http://127.0.0.1:{port}/metrics")).text)

    async def settled() -> bool:
        m = await scraped()
        return m.get(("streamcrew_jobs_total", (("agent", "echo"), ("status", "completed")))) == 35.0

    await wait_until(settled, timeout=10, what="jobs_total to reach 35 completed")
    m = await scraped()
    # Then every counter matches
    assert m[("streamcrew_jobs_total", (("agent", "echo"), ("status", "completed")))] == 35
    assert m[("streamcrew_jobs_total", (("agent", "echo"), ("status", "failed")))] == 2
    assert m[("streamcrew_jobs_total", (("agent", "_unknown"), ("status", "rejected")))] == 3
    assert m[("streamcrew_retries_total", (("agent", "echo"),))] == 5 + 2
    assert m[("streamcrew_dead_letters_total", (("reason", "exhausted"),))] == 2
    assert m[("streamcrew_dead_letters_total", (("reason", "invalid"),))] == 3
    assert m[("streamcrew_job_duration_seconds_count", (("agent", "echo"),))] == 30 + 5 * 2 + 2 * 2
    assert m[("streamcrew_queue_wait_seconds_count", (("agent", "echo"), ("lane", "high")))] == 30
    assert m[("streamcrew_jobs_in_flight", (("agent", "echo"),))] == 0
    # And the stream gauges are read from Redis at scrape time
    assert m[("streamcrew_stream_length", (("partition", "0"), ("stream", "dead")))] == 5
    assert m[("streamcrew_stream_length", (("partition", "0"), ("stream", "results")))] == 40
    assert m[("streamcrew_group_pending", (("group", "workers"), ("partition", "0"), ("stream", "high")))] == 0


def _listening(port: int) -> set[str]:
    """The IPv4 addresses a socket listens on at ``port``, read from /proc/net/tcp (hex, little-endian)."""
    found = set()
    with open("/proc/net/tcp") as table:
        for line in table.readlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.add(".".join(str(int(address[i:i + 2], 16)) for i in (6, 4, 2, 0)))
    return found


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads Linux's /proc/net/tcp")
@pytest.mark.parametrize("how", ["env", "flag"])
async def test_metrics_can_listen_on_loopback_only(workers, how: str) -> None:
    # Given a worker told to serve /metrics on 127.0.0.1 (by the variable or the flag)
    if how == "env":
        child, port = workers.start_serving_metrics(env={"STREAMCREW_METRICS_HOST": "127.0.0.1"})
    else:
        child, port = workers.start_serving_metrics("--metrics-host", "127.0.0.1")
    await wait_until(lambda: bool(_listening(port)), timeout=10, what=f"a listener on port {port}")
    # Then it listens there only (not on 0.0.0.0, the default), serves, and says where
    assert _listening(port) == {"127.0.0.1"}
    async with httpx.AsyncClient() as client:
        assert (await client.get(f"http://127.0.0.1:{port}/metrics")).status_code == 200
    assert f"metrics on http://127.0.0.1:{port}/metrics" in child.log_text()


async def test_metrics_listen_on_every_address_by_default(workers) -> None:
    _, port = workers.start_serving_metrics()
    await wait_until(lambda: bool(_listening(port)), timeout=10, what=f"a listener on port {port}")
    assert _listening(port) == {"0.0.0.0"}


async def test_a_metrics_port_taken_before_the_worker_binds_it_is_given_up(
    workers, squatter: int, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a first port drawn that another server holds (the worker cannot listen there and runs on without /metrics)
    drawn = iter([squatter])
    monkeypatch.setattr(tests.support, "free_port", lambda: next(drawn, None) or free_port())
    # When a test starts a worker serving metrics
    child, port = workers.start_serving_metrics()
    # Then the first worker said so and was stopped, and the port returned is the second worker's own /metrics
    assert port != squatter
    first, second = workers.children
    assert f"cannot listen on port {squatter} " in first.log_text() and not first.alive()
    assert child is second
    async with httpx.AsyncClient() as client:
        assert "# HELP streamcrew_jobs_total" in (await client.get(f"http://127.0.0.1:{port}/metrics")).text


def test_an_idle_connection_to_metrics_is_closed_and_scrapes_go_on() -> None:
    import socket

    from consumers.metrics_server import serve_metrics

    # Given a /metrics endpoint, and a client holding two connections open without a request (or with half of one)
    port = free_port()
    assert serve_metrics(port, "127.0.0.1", request_timeout_s=0.5)
    idle = socket.create_connection(("127.0.0.1", port), timeout=5)
    half = socket.create_connection(("127.0.0.1", port), timeout=5)
    half.sendall(b"GET /metr")
    # When the timeout passes, each is closed (each held a thread of the process for good)
    for conn in (idle, half):
        try:
            assert conn.recv(1) == b"", "the metrics server answered a request never finished"
        except TimeoutError:
            raise AssertionError("an idle /metrics connection was still open 5 s later") from None
        finally:
            conn.close()
    # And a scrape is answered as before
    assert "process_cpu_seconds_total" in httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
