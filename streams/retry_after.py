"""``Retry-After`` from an untrusted peer: finite, non-negative and capped, or nothing.

Shared by the notifier (webhook receivers) and the LLM client (providers):
a peer answering ``inf``, ``1e400``, ``nan`` or ``-5`` must not bench a key or
an endpoint forever, nor crash the caller.
"""

from __future__ import annotations

import math
import time
from email.utils import parsedate_to_datetime


def parse_retry_after(value: str | None, *, cap_s: float, now_s: float | None = None) -> float | None:
    """Seconds to wait (delta-seconds or HTTP-date), clamped to ``[0, cap_s]``; None if absent, garbage or not finite."""
    if not value:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - (time.time() if now_s is None else now_s)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
    if not math.isfinite(seconds):
        return None
    return min(max(0.0, seconds), cap_s)
