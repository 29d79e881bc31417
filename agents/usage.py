"""Per-job LLM usage, summed over every call the job makes.

The worker opens a ledger for each attempt and puts it in a context variable;
LLM clients (and CrewAI's custom LLM, which goes through them) add to it, so
cost accounting works without threading a ledger through user code.
"""

from __future__ import annotations

import contextvars
import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass
class UsageLedger:
    """Token and cost totals of one job."""

    models: list[str] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = 0.0
    calls: int = 0
    offline: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, model: str, prompt_tokens: int, completion_tokens: int, cost_usd: float | None, *, offline: bool = False) -> None:
        """Record one call; an unknown price makes the job's cost unknown (None), never a guess."""
        with self._lock:
            if model not in self.models:
                self.models.append(model)
            self.prompt_tokens += prompt_tokens
            self.completion_tokens += completion_tokens
            self.cost_usd = None if cost_usd is None or self.cost_usd is None else self.cost_usd + cost_usd
            self.calls += 1
            self.offline = self.offline or offline

    def summary(self) -> dict[str, Any] | None:
        """The result's ``usage`` field, or None when no LLM was called."""
        if not self.calls:
            return None
        out: dict[str, Any] = {
            "model": ",".join(self.models),
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cost_usd": None if self.cost_usd is None else round(self.cost_usd, 8),
        }
        if self.offline:
            out["offline"] = True
        return out


current_ledger: contextvars.ContextVar[UsageLedger | None] = contextvars.ContextVar("streamcrew_usage", default=None)


def record_usage(model: str, prompt_tokens: int, completion_tokens: int, cost_usd: float | None, *, offline: bool = False) -> None:
    """Add one LLM call to the running job's ledger, if there is one."""
    ledger = current_ledger.get()
    if ledger is not None:
        ledger.add(model, prompt_tokens, completion_tokens, cost_usd, offline=offline)
