"""Every Redis key streamcrew owns, built from one prefix.

All keys start with ``<prefix>:`` so ``SCAN MATCH <prefix>:*`` finds every key
the system owns and nothing else. With Redis Cluster, a prefix like
``{streamcrew}`` puts every key in one hash slot, which the Lua scripts need.
"""

from __future__ import annotations

from dataclasses import dataclass

LANES: tuple[str, ...] = ("high", "normal", "low")
WORKERS_GROUP = "workers"
NOTIFIER_GROUP = "notifier"


@dataclass(frozen=True, slots=True)
class Keys:
    prefix: str = "streamcrew"

    def lane(self, name: str) -> str:
        if name not in LANES:
            raise ValueError(f"unknown lane {name!r}; lanes are {', '.join(LANES)}")
        return f"{self.prefix}:requests:{name}"

    @property
    def lanes(self) -> tuple[str, ...]:
        """Lane stream keys in strict priority order, high first."""
        return tuple(self.lane(n) for n in LANES)

    def lane_name(self, key: str) -> str:
        return key.rsplit(":", 1)[-1]

    @property
    def results(self) -> str:
        return f"{self.prefix}:results"

    @property
    def dead(self) -> str:
        return f"{self.prefix}:dead"

    @property
    def webhooks_dead(self) -> str:
        return f"{self.prefix}:webhooks:dead"

    @property
    def delayed(self) -> str:
        """Sorted set of requests waiting for their retry time (score: due epoch ms)."""
        return f"{self.prefix}:delayed"

    @property
    def webhooks_delayed(self) -> str:
        return f"{self.prefix}:webhooks:delayed"

    @property
    def webhooks_due(self) -> str:
        """Webhook retries whose time has come, read by the ``notifier`` group beside the results."""
        return f"{self.prefix}:webhooks:due"

    @property
    def clock(self) -> str:
        """Last entry ID the producers issued: one clock for the three lanes keeps id-less job ids unique."""
        return f"{self.prefix}:clock"

    def job(self, job_id: str) -> str:
        return f"{self.prefix}:job:{job_id}"

    @property
    def job_prefix(self) -> str:
        return f"{self.prefix}:job:"

    def workflow(self, workflow_id: str) -> str:
        """A workflow's fan-in state (its steps, their results, the outstanding count); the Lua derives it from
        ``job_prefix``: ``<prefix>:job:`` -> ``<prefix>:wf:``."""
        return f"{self.prefix}:wf:{workflow_id}"

    @property
    def workflow_timeouts(self) -> str:
        """Sorted set of running workflows with a ``timeout_s`` (score: epoch ms when they expire)."""
        return f"{self.prefix}:workflows:timeouts"

    def ratelimit(self, name: str) -> str:
        return f"{self.prefix}:ratelimit:{name}"

    @property
    def pattern(self) -> str:
        return f"{self.prefix}:*"
