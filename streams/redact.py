"""Text cleaned of secrets it must never repeat: API keys, and a URL's credentials and query values.

An untrusted peer's text is copied far (an LLM provider's error into a job's error, a webhook receiver's answer into
the notifier's log and dead letters), and a peer may quote back what it was sent: the Authorization header, the URL.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import yarl

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
