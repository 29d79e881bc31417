"""The worker's summary line: counts by outcome, rate and p95 of one window, then a fresh window."""

from streams.tally import MAX_SAMPLES, JobTally


def test_summary_counts_outcomes_and_p95_then_starts_a_new_window() -> None:
    tally = JobTally()
    for i in range(1, 101):
        tally.add("completed" if i % 10 else "retry", i / 100)
    line = tally.summary()
    assert line is not None and line.startswith("100 attempts in ")
    assert "completed=90 retry=10" in line and line.endswith("p95 run 0.960s")
    assert tally.summary() is None  # nothing ended since: idle workers stay quiet


def test_samples_are_bounded() -> None:
    tally = JobTally()
    for i in range(3 * MAX_SAMPLES):
        tally.add("completed", 1.0 if i % 2 else 0.0)
    assert len(tally._seconds) == MAX_SAMPLES
    line = tally.summary()
    assert line is not None and f"completed={3 * MAX_SAMPLES}" in line and line.endswith("p95 run 1.000s")
