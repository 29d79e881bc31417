"""streamcrew's error tree.

StreamcrewError                 root of everything streamcrew raises on purpose
├── ConfigError                 a setting or option is invalid
├── RedisUnavailable            no Redis could be reached or started
├── NoGroupError                a consumer group vanished under a running consumer (NOGROUP)
├── DecodeError                 a stream entry is not a valid envelope; keeps the raw fields
├── RequestTooLarge             an encoded request is over the size cap
├── InvalidRequest              a request a producer may not publish (a reserved id, ...)
├── JobNotFound                 no job record for that id
├── DeadLetterNotFound          no dead letter with that entry ID
├── JobIsLive                   a dead letter's job id names a live job again: no replay
├── AgentFailed                 an agent's failure said again without secrets; stored as it is said
└── AgentControl                control flow an agent may raise; never logged as an error
    ├── RetryLater              run this job again after ``delay_s`` (counts as an attempt)
    └── Reject                  the request can never succeed: end it ``rejected``, no retry
"""

from __future__ import annotations

import logging
from collections.abc import Mapping


class StreamcrewError(Exception):
    """Root of every error streamcrew raises on purpose."""


class ConfigError(StreamcrewError):
    """Raised when a setting or CLI option is invalid."""


class RedisUnavailable(StreamcrewError):
    """Raised when no Redis server can be reached or started."""


class NoGroupError(StreamcrewError):
    """Raised when a consumer group disappeared under a running consumer."""


class DecodeError(StreamcrewError):
    """Raised when a stream entry is not a valid envelope; ``raw`` keeps its fields."""

    def __init__(self, reason: str, raw: Mapping[str, str]) -> None:
        super().__init__(reason)
        self.reason = reason
        self.raw = dict(raw)


def refusal(raw: Mapping[str, str], what: str, job_id: str, exc: Exception) -> DecodeError:
    """The DecodeError of an entry a reader failed on (its own bug on a hostile entry), said in the log: the entry is
    rejected and dead-lettered with the reason, and the batch read with it goes on."""
    logging.getLogger("streamcrew.jobs").error("job=%s: %s failed on its request (%s); the request is rejected",
                                               job_id, what, type(exc).__name__, exc_info=exc)
    return DecodeError(f"the request could not be read: {what} failed ({type(exc).__name__})", raw)


class RequestTooLarge(StreamcrewError):
    """Raised when an encoded request exceeds ``max_request_bytes``."""


class InvalidRequest(StreamcrewError, ValueError):
    """Raised when a producer tries to publish a request it may not (a reserved id, ...)."""


class JobNotFound(StreamcrewError):
    """Raised when no job record exists for an id."""


class DeadLetterNotFound(StreamcrewError):
    """Raised when no dead letter has that entry ID (never existed, replayed or purged)."""


class JobIsLive(StreamcrewError):
    """Raised when replaying a dead letter whose job id is queued, running or retrying again."""


class AgentFailed(StreamcrewError):
    """An agent's failure said again by the agent layer: its type and message, cleaned of secrets only that layer
    knows (the LLM keys a model's answer quoted). The worker stores and logs its text as it is, not prefixed by this
    type's name."""


class AgentControl(Exception):
    """Base of the control-flow exceptions an agent may raise."""


class RetryLater(AgentControl):
    """Run this job again after ``delay_s`` seconds; the attempt counts."""

    def __init__(self, delay_s: float = 1.0, reason: str = "retry requested by agent") -> None:
        super().__init__(reason)
        self.delay_s = max(0.0, float(delay_s))
        self.reason = reason


class Reject(AgentControl):
    """End the job ``rejected`` with ``reason``; it is never retried."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
