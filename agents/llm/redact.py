"""What of an LLM configuration must never be repeated (its API keys, its endpoint URL's credentials and query
values), and text cleaned of it: a provider's error text, an answer, an agent's error.

Kept apart from the client: the agent runner cleans every failed attempt's error text with the configured
secrets (a crew's error may quote a model's answer), and must not import aiohttp to do it.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import yarl

    from agents.llm.settings import LLMSettings

KEY_RUN = 8  # this many characters of a key in a row are a leak; a provider's "...c85e" is not


class Redactor:
    """Replaces each key by its label, then each other secret by ``[redacted]``, then masks any ``KEY_RUN``
    characters in a row of any of them (a partly masked or cut-short key: ``sk-live-ABCDE...``)."""

    def __init__(self, keys: Sequence[tuple[str, str]], secrets: Sequence[str]) -> None:
        self._keys = [(secret, label) for secret, label in keys if secret]
        self._secrets = sorted((s for s in secrets if s), key=len, reverse=True)  # no part replaced before its whole
        everything = [secret for secret, _ in self._keys] + self._secrets
        self._runs = frozenset(s[i:i + KEY_RUN] for s in everything for i in range(len(s) - KEY_RUN + 1))

    def __bool__(self) -> bool:
        return bool(self._keys or self._secrets)

    def __call__(self, text: str) -> str:
        for secret, label in self._keys:
            if secret in text:
                text = text.replace(secret, label)
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, "[redacted]")
        return mask_runs(text, self._runs)


def mask_runs(text: str, runs: frozenset[str]) -> str:
    """``text`` with each occurrence of any of ``runs`` (``KEY_RUN`` characters each), and so any longer run of a
    secret, replaced by ``[redacted]``."""
    spans = []
    for run in runs:
        at = text.find(run)
        while at >= 0:
            spans.append((at, at + len(run)))
            at = text.find(run, at + 1)
    if not spans:
        return text
    out, done = [], 0
    for start, end in sorted(spans):
        if start > done:
            out += [text[done:start], "[redacted]"]
        elif not out:
            out.append("[redacted]")
        done = max(done, end)
    return "".join(out) + text[done:]


def url_secrets(url: yarl.URL) -> list[str]:
    """What of an endpoint URL must not be repeated: its user, password, the pair and its Basic (base64) form,
    and each query value (``?token=...``), raw and decoded; longest first, so no part is replaced before its whole."""
    import yarl  # here: the offline model, and a worker without LLM agents, need no URL

    found: set[str] = set()
    if url.user is not None or url.password is not None:
        pair = f"{url.user or ''}:{url.password or ''}"
        found |= {url.user or "", url.password or "", url.raw_user or "", url.raw_password or "", pair,
                  base64.b64encode(pair.encode()).decode()}
    for name, value in url.query.items():
        found |= {value, yarl.URL.build(query={name: value}).raw_query_string.split("=", 1)[1]}
    return sorted((s for s in found if len(s) >= 3), key=len, reverse=True)  # shorter: no secret, and would mangle the text


def surely_secret(url: yarl.URL) -> list[str]:
    """Of ``url_secrets``, what is surely a secret in free text (an answer, an agent's error): the credentials of 8
    characters or more and the query values of 16 or more (a token, not an ``api-version`` date)."""
    everything = url_secrets(url)
    credentials = set(url_secrets(url.with_query(None)))
    return [x for x in everything if len(x) >= (8 if x in credentials else 16)]


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
