"""At the default level a worker logs a summary every few seconds, not a line per job (issue 11 §4).

Per-job lines are DEBUG; INFO keeps one line per retry, dead letter and reclaim.
"""

from __future__ import annotations

import re
import time
from collections import Counter

from streams.keys import Keys
from tests.support import WorkerFactory, wait_for_log, wait_results

SUMMARY = re.compile(r"jobs: (\d+) attempts in [\d.]+s \([\d.]+/s\): (.*); p95 run [\d.]+s")


def _summed(log: str) -> Counter[str]:
    total: Counter[str] = Counter()
    for match in SUMMARY.finditer(log):
        for part in match.group(2).split():
            name, _, n = part.partition("=")
            total[name] += int(n)
    return total


async def test_default_level_summarises_and_names_each_retry_and_dead_letter(redis, keys: Keys, producer, workers: WorkerFactory) -> None:
    # Given a worker at the default level, summarising every 0.3 s
    worker = workers.start("--agents", "echo", "--concurrency", "20", env={"STREAMCREW_LOG_SUMMARY_S": "0.3"})
    # When 20 jobs complete, one completes after a retry and one fails its only attempt
    for i in range(20):
        await producer.publish("echo", {"i": i}, id=f"ok-{i}")
    await producer.publish("echo", {"fail_first": 1}, id="flaky", max_attempts=2)
    await producer.publish("echo", {"fail_first": 1}, id="hopeless", max_attempts=1)
    await wait_results(redis, keys, 22, timeout=30)
    expected = Counter({"completed": 21, "retry": 1, "failed": 1})
    deadline = time.monotonic() + 10
    while _summed(worker.log_text()) != expected:
        assert time.monotonic() < deadline, f"summary lines do not add up to {dict(expected)}:\n{worker.log_text()[-3000:]}"
        time.sleep(0.1)
    log = worker.log_text()
    # Then no line per job, but one line for the retry and one for the dead letter
    assert "outcome=" not in log
    assert len(re.findall(r"job=flaky agent=echo retry in [\d.]+s after attempt 1 of 2: RuntimeError", log)) == 1, log
    assert len(re.findall(r"job=hopeless agent=echo failed, dead-lettered \(exhausted\)", log)) == 1, log
    assert "job=ok-" not in log


async def test_debug_level_logs_each_attempt(redis, keys: Keys, producer, workers: WorkerFactory) -> None:
    worker = workers.start("--agents", "echo", "--log-level", "debug")
    await producer.publish("echo", {}, id="seen")
    await wait_results(redis, keys, 1, timeout=20)
    # (the line follows the settle's reply: the result can be read in Redis a moment before the worker writes it)
    wait_for_log(worker, "job=seen agent=echo lane=normal attempt=1 outcome=completed seconds=", timeout=10)
