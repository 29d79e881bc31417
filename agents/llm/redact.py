"""What of an LLM configuration must never be repeated (its API keys, its endpoint URL's credentials and query
values), and text cleaned of it: a provider's error text, an answer, an agent's error.

Kept apart from the client: the agent runner cleans every failed attempt's error text with the configured
secrets (a crew's error may quote a model's answer), and must not import aiohttp to do it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from streams.redact import KEY_RUN, Redactor, mask_runs, url_secrets

if TYPE_CHECKING:
    import yarl

    from agents.llm.settings import LLMSettings

__all__ = ["KEY_RUN", "Redactor", "configured", "mask_runs", "surely_secret", "url_secrets"]


# A query parameter so named holds a credential (``?key=``, ``?api_key=``, ``?access_token=``, ``?sig=``): its value is
# a secret from KEY_RUN characters, as a key is; any other parameter's (``?api-version=2024-06-01``) from 16.
_SECRET_NAME = re.compile(r"key|token|secret|pass|auth|sig|cred|session|code", re.IGNORECASE)


def surely_secret(url: yarl.URL) -> list[str]:
    """Of ``url_secrets``, what is surely a secret in free text (an answer, an agent's error): the credentials and the
    values of credential-named query parameters of ``KEY_RUN`` characters or more, any other query value of 16 or more
    (a token, not an ``api-version`` date)."""
    everything = url_secrets(url)
    credentials = set(url_secrets(url.with_query(None)))
    named = [(name, value) for name, value in url.query.items() if _SECRET_NAME.search(name)]
    credentials |= set(url_secrets(url.with_query(None).with_query(named))) if named else set()
    return [x for x in everything if len(x) >= (KEY_RUN if x in credentials else 16)]


def configured(settings: LLMSettings) -> Redactor:
    """The redactor of free text for ``settings``: its keys (as the client labels them) and its URL's sure secrets.
    A key shorter than ``KEY_RUN`` is left alone: a placeholder (Ollama's ``ollama``, an ``x``), not a secret, and
    replacing it garbled every agent's error (``upstream key#1:11434 refused``)."""
    keys = [(key.get_secret_value(), f"key#{i}") for i, key in enumerate(settings.api_keys, start=1)
            if len(key.get_secret_value()) >= KEY_RUN]
    secrets: list[str] = []
    if settings.base_url is not None:
        import yarl

        secrets = surely_secret(yarl.URL(settings.base_url))
    return Redactor(keys, secrets)
