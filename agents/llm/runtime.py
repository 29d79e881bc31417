"""The process's LLM: configured once by the worker, built lazily per event loop.

``configure(settings)`` is called once at worker start (default: ``LLMSettings()``
from the environment). The model object is created on first use inside the
running loop and rebuilt if the loop changes (tests, ``asyncio.run`` in
scripts), because pooled connections belong to one loop.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from agents.llm import redact as redaction
from agents.llm.offline import OfflineModel
from agents.llm.providers import ChatModel
from agents.llm.settings import LLMSettings

if TYPE_CHECKING:
    import aiohttp

_settings: LLMSettings | None = None
_http: aiohttp.ClientSession | None = None
_model: ChatModel | None = None
_loop: asyncio.AbstractEventLoop | None = None
_redactor: redaction.Redactor | None = None


def configure(settings: LLMSettings | None = None, *, http: aiohttp.ClientSession | None = None) -> None:
    """Set the LLM settings (and optionally the HTTP client) every LLM agent in this process uses."""
    global _settings, _http, _model, _loop, _redactor
    _settings, _http, _model, _loop, _redactor = settings, http, None, None, None


def redact(text: str) -> str:
    """``text`` without the configured API keys (each becomes its label, any 8 characters of one in a row
    ``[redacted]``) or the endpoint URL's credentials and long query values: an agent's error may quote a model's
    answer (CrewAI quotes a tool call it could not use), and it reaches the job's result, dead letter and log."""
    global _redactor
    if _redactor is None:
        _redactor = redaction.configured(settings())
    return _redactor(text) if _redactor else text


def settings() -> LLMSettings:
    global _settings
    if _settings is None:
        _settings = LLMSettings()
    return _settings


def get_model() -> ChatModel:
    """The configured model for the running loop: ``LLMClient``, or ``OfflineModel`` without a base URL."""
    global _model, _loop
    loop = asyncio.get_running_loop()
    if _model is None or _loop is not loop:
        s = settings()
        if s.offline:
            _model = OfflineModel()
        else:
            from agents.llm.client import LLMClient  # aiohttp only when a model is reached over HTTP

            _model = LLMClient(s, http=_http)
        _loop = loop
    return _model


async def aclose() -> None:
    """Close the model's connections (worker shutdown)."""
    global _model, _loop
    model, _model, _loop = _model, None, None
    if model is not None:
        await model.aclose()
