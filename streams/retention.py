"""Stream retention: lanes lose what every group acknowledged; the results stream keeps ``results_maxlen``
acknowledged events and cuts needed ones only past the hard cap.

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
# A lane's acknowledged entries behind a pending one (the bulk trim stops at it) are deleted one by one once this old:
# a run of hours held every entry after it; runs shorter than this wait for the bulk trim, as cheap as it gets.
PINNED_AFTER_MS = 60_000


# Entries a call deletes behind a pending one at most (it reads them whole, and up to 9x as many pending ones).
SWEEP_BATCH = 100


async def trim_lanes(scripts: Scripts, keys: Keys, *, pinned_after_ms: int = PINNED_AFTER_MS) -> int:
    """Trim a partition's lanes and resumed streams (one slot: one call for them all, repeated while a sweep behind a
    pending entry was full); returns how many entries went."""
    removed = 0
    for _ in range(MAX_CALLS):
        gone, more = (int(x) for x in await scripts.trim(keys=list(keys.work_streams), args=[SWEEP_BATCH, pinned_after_ms]))
        removed += gone
        if not more:
            break
    return removed


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
