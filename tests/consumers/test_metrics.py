"""The worker's /metrics figures match the jobs it ran."""

import httpx
from prometheus_client.parser import text_string_to_metric_families

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
    port = free_port()
    workers.start("--concurrency", "20", "--metrics-port", str(port))
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
