"""Errors of the LLM layer (children of ``streams.errors.StreamcrewError``).

LLMError                 root of what agents/llm raises on purpose
├── LLMUnavailable       the retry budget ran out (429s, 5xx, timeouts); the worker retries the job
└── LLMRequestError      the provider refused the request itself (4xx other than 429)

Messages name the model, the key's redacted label (``key#2``) and statuses,
never a key. They are raised outside ``except`` blocks, so no transport error
is chained to them: CrewAI's own retry wrapper inspects the chain and would
otherwise retry a job-level failure a second time.
"""

from __future__ import annotations

from streams.errors import StreamcrewError


class LLMError(StreamcrewError):
    """Root of the errors the LLM client raises on purpose."""


class LLMUnavailable(LLMError):
    """Raised when an LLM call exhausted its retry budget; the job should be retried later."""


class LLMRequestError(LLMError):
    """Raised when the provider rejects the request (HTTP 4xx other than 429); ``status`` keeps the code."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status
