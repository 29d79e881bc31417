"""The queue monitor's figures (contract §12) over results whose timestamps the test writes."""

from __future__ import annotations

import json

import orjson
import pytest

from streams.envelope import JobResult, Status
from streams.keys import Keys
from streams.stats import queue_stats
from streams.window import MAX_WINDOW, PAGE_BYTES, spread, summarize, window_figures

T0 = 1_800_000_000_000


def result(i: int, status: Status = Status.COMPLETED, *, wait_ms: int = 0, run_ms: int = 0, started: bool = True,
           usage: dict[str, object] | None = None, tenant: str | None = None) -> JobResult:
    submitted = T0 + i * 10_000
    started_at = submitted + wait_ms if started else None
    return JobResult(id=f"j{i}", agent="echo", status=status, attempts=1, submitted_at=submitted, started_at=started_at,
                     finished_at=(started_at or submitted) + run_ms, usage=usage, tenant=tenant,
                     result={} if status == Status.COMPLETED else None, error=None if status == Status.COMPLETED else "x")


def test_nearest_rank_percentiles_are_values_jobs_had() -> None:
    assert spread(list(range(1, 101))) == {"avg": 50.5, "p50": 50, "p95": 95, "p99": 99}
    assert spread([7]) == {"avg": 7.0, "p50": 7, "p95": 7, "p99": 7}
    assert spread([10, 10, 10, 10, 10, 10, 10, 10, 10, 1000]) == {"avg": 109.0, "p50": 10, "p95": 1000, "p99": 1000}
    assert spread([]) == {"avg": None, "p50": None, "p95": None, "p99": None}


async def test_figures_from_the_results_stream_window(redis, keys: Keys) -> None:
    # Given 100 completed jobs that waited i ms and ran 100 + i ms, two with a known price, one with an unknown one,
    # and a failed, a rejected (never started) and an expired job, some of two tenants
    events: list[JobResult] = []
    for i in range(1, 101):
        usage = None
        if i == 1:
            usage = {"model": "deepseek-v3.2", "prompt_tokens": 1000, "completion_tokens": 500, "cost_usd": 0.00063}
        elif i == 2:
            usage = {"model": "gpt-4o-2024-05-13", "prompt_tokens": 100, "completion_tokens": 100, "cost_usd": 0.002}
        elif i == 3:
            usage = {"model": "who-knows", "prompt_tokens": 10, "completion_tokens": 10, "cost_usd": None}
        events.append(result(i, wait_ms=i, run_ms=100 + i, usage=usage, tenant="acme" if i <= 3 else ("globex" if i == 4 else None)))
    events.append(result(101, Status.FAILED, wait_ms=500, run_ms=50, tenant="globex"))
    events.append(result(102, Status.REJECTED, started=False))
    events.append(result(103, Status.EXPIRED, started=False))
    for event in events:
        await redis.xadd(keys.results, event.to_fields())
    await redis.xadd(keys.results, {"garbage": "no id or status"})  # a user's stray entry is skipped, not fatal

    # When the figures are computed over the default window
    figures = await window_figures(redis, keys)

    # Then the counts, the spreads (latency over completed jobs: 100 + 2i ms; waits over all started) and spend are exact
    assert figures["window"]["size"] == 1000 and figures["window"]["results"] == 103
    assert (figures["completed"], figures["failed"], figures["rejected"], figures["expired"]) == (100, 1, 1, 1)
    assert figures["latency_ms"] == {"avg": 201.0, "p50": 200, "p95": 290, "p99": 298}
    assert figures["queue_wait_ms"] == spread([*range(1, 101), 500]) == {"avg": 55.0, "p50": 51, "p95": 96, "p99": 100}
    assert figures["tokens"] == 1500 + 200 + 20
    assert figures["cost_usd"] == pytest.approx(0.00263) and figures["unpriced"] == 1
    assert figures["by_model"] == {
        "deepseek-v3.2": {"results": 1, "tokens": 1500, "cost_usd": pytest.approx(0.00063), "unpriced": 0},
        "gpt-4o-2024-05-13": {"results": 1, "tokens": 200, "cost_usd": pytest.approx(0.002), "unpriced": 0},
        "who-knows": {"results": 1, "tokens": 20, "cost_usd": None, "unpriced": 1},
    }
    assert figures["by_tenant"] == {
        "acme": {"results": 3, "tokens": 1720, "cost_usd": pytest.approx(0.00263), "unpriced": 1},
        "globex": {"results": 2, "tokens": 0, "cost_usd": 0.0, "unpriced": 0},
    }
    assert figures["window"]["newest_finished_at"] == events[-1].finished_at
    json.dumps(figures)  # plain JSON, as stats --json and the gateway print it

    # And a smaller window covers only the newest results
    small = await window_figures(redis, keys, 4)
    assert small["window"]["results"] == 3  # the stray entry is one of the 4
    assert (small["completed"], small["failed"], small["rejected"], small["expired"]) == (0, 1, 1, 1)
    assert small["latency_ms"]["p50"] is None and small["queue_wait_ms"]["p99"] == 500


async def test_queue_stats_carry_the_window_and_an_empty_one_is_all_zero(redis, keys: Keys) -> None:
    figures = await queue_stats(redis, keys)
    assert figures["completed"] == 0 and figures["window"] == {"size": 1000, "results": 0, "oldest_finished_at": None, "newest_finished_at": None}
    assert figures["latency_ms"]["p95"] is None and figures["cost_usd"] == 0 and figures["by_model"] == {} == figures["by_tenant"]
    assert "completed" not in await queue_stats(redis, keys, window=None)
    with pytest.raises(ValueError, match="window must be"):
        await window_figures(redis, keys, MAX_WINDOW + 1)


def test_summarize_takes_any_iterable() -> None:
    figures = summarize(iter([result(1, wait_ms=5, run_ms=10)]), window=1)
    assert figures["latency_ms"]["p99"] == 15 and figures["queue_wait_ms"]["avg"] == 5.0


def test_a_workflows_usage_is_not_counted_on_top_of_its_steps() -> None:
    # Given a workflow of two LLM steps: each step's result carries its usage, the workflow's result their sum
    steps = [JobResult(id=f"wf-1::s{i}", agent="ask", status=Status.COMPLETED, attempts=1, submitted_at=T0, started_at=T0,
                       finished_at=T0 + 5, result={}, tenant="acme",
                       usage={"model": "m", "prompt_tokens": 10 * i, "completion_tokens": 1, "cost_usd": 0.001 * i})
             for i in (1, 2)]
    workflow = JobResult(id="wf-1", agent="workflow", status=Status.COMPLETED, attempts=1, submitted_at=T0, started_at=T0,
                         finished_at=T0 + 9, result={}, tenant="acme",
                         usage={"model": "m", "prompt_tokens": 30, "completion_tokens": 2, "cost_usd": 0.003})
    figures = summarize([workflow, *steps])
    # Then the spend is the steps' once, in the totals, per model and per tenant; the workflow still counts as a result
    assert (figures["tokens"], figures["cost_usd"]) == (32, 0.003)
    assert figures["by_model"]["m"] == {"results": 2, "tokens": 32, "cost_usd": 0.003, "unpriced": 0}
    assert figures["by_tenant"]["acme"] == {"results": 3, "tokens": 32, "cost_usd": 0.003, "unpriced": 0}
    assert figures["completed"] == 3


async def test_result_entries_with_times_no_clock_gives_are_left_out_of_the_spreads_not_fatal(redis, keys: Keys) -> None:
    # Given two real results and users' raw XADDs whose times are numbers, but no epoch milliseconds
    for event in (result(1, wait_ms=5, run_ms=10), result(2, wait_ms=7, run_ms=20)):
        await redis.xadd(keys.results, event.to_fields())
    base = result(3, wait_ms=1, run_ms=1).to_fields()
    for name, value in (("finished_at", "9" * 400), ("submitted_at", "-" + "9" * 400), ("started_at", "9" * 30)):
        await redis.xadd(keys.results, {**base, name: value})

    # When the figures are computed
    figures = await window_figures(redis, keys)

    # Then every entry counts as a result, but the spreads are the real jobs' (a time past year 9999 counts as absent)
    assert figures["window"]["results"] == 5 and figures["completed"] == 5
    assert figures["latency_ms"] == spread([15, 27, 2])  # the third raw entry's finished_at and submitted_at are real
    assert figures["queue_wait_ms"] == spread([5, 7, 1])
    assert figures["window"]["newest_finished_at"] == T0 + 3 * 10_000 + 2
    json.dumps(figures)


def test_usage_amounts_out_of_a_ledgers_bounds_do_not_reach_the_sums() -> None:
    # Given a real LLM result and users' raw results whose usage holds amounts no call costs or counts
    real = result(1, usage={"model": "m", "prompt_tokens": 10, "completion_tokens": 5, "cost_usd": 0.001}, tenant="acme")
    wild = [result(i, usage=usage, tenant="acme") for i, usage in enumerate((
        {"model": "m", "prompt_tokens": 2**64 - 1, "completion_tokens": 2**64 - 1, "cost_usd": 1e308},
        {"model": "m", "prompt_tokens": -1000, "completion_tokens": 0, "cost_usd": 1e308},
        {"model": "m", "cost_usd": -5.0},
    ), start=2)]

    # When the figures are computed
    figures = summarize([real, *wild])

    # Then the sums are the real result's: the wild amounts count as unknown (no price, no tokens), and the figures
    # stay strict JSON (stats --json printed Infinity; orjson, the gateway's encoder, refused the token sum)
    assert (figures["tokens"], figures["cost_usd"], figures["unpriced"]) == (15, 0.001, 3)
    assert figures["by_model"]["m"] == figures["by_tenant"]["acme"] == {"results": 4, "tokens": 15, "cost_usd": 0.001, "unpriced": 3}
    json.dumps(figures, allow_nan=False)
    orjson.dumps(figures)


async def test_a_usage_that_is_no_json_object_leaves_its_result_counted_with_an_unknown_cost(redis, keys: Keys) -> None:
    # Given a real LLM result and users' raw XADDs whose usage is Python's NaN, a number past a float's range, a list
    real = result(1, usage={"model": "m", "prompt_tokens": 10, "completion_tokens": 5, "cost_usd": 0.001}, tenant="acme")
    await redis.xadd(keys.results, real.to_fields())
    for usage in ('{"model": "m", "cost_usd": NaN}', '{"cost_usd": 1e400}', "[1, 2]"):
        await redis.xadd(keys.results, {**result(2, tenant="acme").to_fields(), "usage": usage})
    # When the figures are computed
    figures = await window_figures(redis, keys)
    # Then every entry is a result (they were skipped: completed count, latency and tenant figures lost with them),
    # the three with an unknown cost, the real spend intact
    assert figures["window"]["results"] == 4 and figures["completed"] == 4, figures
    assert (figures["unpriced"], figures["cost_usd"], figures["tokens"]) == (3, 0.001, 15), figures
    assert figures["by_tenant"]["acme"]["results"] == 4
    json.dumps(figures)


async def _xrevrange_calls(redis) -> int:
    stats = await redis.info("commandstats")
    return int(stats.get("cmdstat_xrevrange", {}).get("calls", 0))


async def test_large_outputs_are_read_in_pages_and_every_result_counts_once(redis, keys: Keys) -> None:
    # Given 40 results whose outputs are 1 MiB each, between small ones (a window spans pages of both sizes)
    big = {"text": "x" * (1 << 20)}
    events = [result(i, wait_ms=i, run_ms=1) for i in range(1, 31)]
    events += [JobResult(**{**result(i, wait_ms=i, run_ms=1).model_dump(), "result": big}) for i in range(31, 71)]
    events += [result(i, wait_ms=i, run_ms=1) for i in range(71, 101)]
    for event in events:
        await redis.xadd(keys.results, event.to_fields())
    before = await _xrevrange_calls(redis)

    # When the figures are computed over them
    figures = await window_figures(redis, keys, 100)

    # Then each result counts once (no entry lost or repeated at a page's edge) ...
    assert figures["window"]["results"] == 100 and figures["completed"] == 100
    assert figures["queue_wait_ms"] == spread(list(range(1, 101)))
    # ... and Redis sent the 40 MiB of outputs in pages of a few MiB (one XREVRANGE of the window held Redis for
    # the whole of it, and the caller held every output at once)
    assert await _xrevrange_calls(redis) - before >= 40 * (1 << 20) // PAGE_BYTES


async def test_a_window_of_small_results_takes_few_pages(redis, keys: Keys) -> None:
    for i in range(1, 1201):
        await redis.xadd(keys.results, result(i).to_fields())
    before = await _xrevrange_calls(redis)
    figures = await window_figures(redis, keys, 1000)
    assert figures["window"]["results"] == 1000 and figures["window"]["oldest_finished_at"] == result(201).finished_at
    assert await _xrevrange_calls(redis) - before <= 8  # pages of 16, 32, ... 512
