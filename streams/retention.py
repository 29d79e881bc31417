"""Results-stream retention: acknowledged events go past ``results_maxlen``, needed ones only past the hard cap.

The results stream is trimmed like the lanes, to what every consumer group has
acknowledged, so a notifier (or a group of yours) that is down loses nothing;
``results_hard_maxlen`` bounds its memory all the same, and what that cap cuts
unread is counted in ``streamcrew_results_dropped_total`` (alert
``StreamcrewResultsDropped``).
"""

from __future__ import annotations

import logging

from streams import metrics
from streams.keys import Keys
from streams.scripts import Scripts

log = logging.getLogger("streamcrew.retention")

# Acknowledged entries one script call removes (it reads their IDs); calls repeat while a batch was full.
TRIM_BATCH = 1000
MAX_CALLS = 100


async def trim_results(scripts: Scripts, keys: Keys, *, keep: int, hard_cap: int) -> tuple[int, int]:
    """Trim the results stream once; returns ``(acknowledged removed, unacknowledged removed)``."""
    removed = dropped = 0
    for _ in range(MAX_CALLS):
        acked, cut = (int(x) for x in await scripts.trim_results(keys=[keys.results], args=[keep, hard_cap, TRIM_BATCH]))
        removed += acked
        dropped += cut
        if acked < TRIM_BATCH:
            break
    if dropped:
        metrics.RESULTS_DROPPED.inc(dropped)
        log.warning("results stream over its hard cap (%d): cut %d events some consumer group had not acknowledged "
                    "(is the notifier down?)", hard_cap, dropped)
    return removed, dropped
