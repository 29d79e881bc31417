"""Jobs done since the last summary line: counts by outcome, rate and p95 run time.

At the default level a worker logs one INFO summary every few seconds instead
of one line per job (a line per job cost a quarter of the no-op throughput);
per-job lines are at DEBUG.
"""

from __future__ import annotations

import time
from collections import Counter

MAX_SAMPLES = 20_000  # run times kept per window for the p95; beyond that every k-th is kept


class JobTally:
    """Counts attempts as they end; :meth:`summary` returns the window's line and starts a new window."""

    def __init__(self) -> None:
        self._outcomes: Counter[str] = Counter()
        self._seconds: list[float] = []
        self._seen = 0
        self._since = time.monotonic()

    def add(self, outcome: str, seconds: float) -> None:
        self._outcomes[outcome] += 1
        self._seen += 1
        if len(self._seconds) < MAX_SAMPLES:
            self._seconds.append(seconds)
        elif self._seen % (self._seen // MAX_SAMPLES + 1) == 0:
            self._seconds[self._seen % MAX_SAMPLES] = seconds

    def due(self, every_s: float) -> bool:
        return every_s > 0 and time.monotonic() - self._since >= every_s

    def summary(self) -> str | None:
        """``None`` when no attempt ended in the window (idle workers stay quiet)."""
        now = time.monotonic()
        elapsed, self._since = max(now - self._since, 1e-9), now
        if not self._seen:
            return None
        outcomes = " ".join(f"{name}={n}" for name, n in sorted(self._outcomes.items()))
        seconds = sorted(self._seconds)
        p95 = seconds[min(len(seconds) - 1, int(0.95 * len(seconds)))]
        line = f"{self._seen} attempts in {elapsed:.1f}s ({self._seen / elapsed:.1f}/s): {outcomes}; p95 run {p95:.3f}s"
        self._outcomes.clear()
        self._seconds.clear()
        self._seen = 0
        return line
