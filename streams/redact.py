"""Text cleaned of secrets it must never repeat: API keys, and a URL's credentials and query values.

An untrusted peer's text is copied far (an LLM provider's error into a job's error, a webhook receiver's answer into
the notifier's log and dead letters), and a peer may quote back what it was sent: the Authorization header, the URL.
"""

from __future__ import annotations

import base64
import contextlib
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import yarl

KEY_RUN = 8  # this many characters of a key in a row are a leak; a provider's "...c85e" is not


class Redactor:
    """Replaces each key by its label and each other secret by ``[redacted]`` in one pass (a replacement is never
    scanned again), then masks any ``KEY_RUN`` characters in a row of any of them (a partly masked or cut-short key:
    ``sk-live-ABCDE...``). A secret shorter than ``KEY_RUN`` (a short query value) is replaced only where it stands
    alone, not inside a word: ``?source=app`` must not turn an error's "application/json" into "[redacted]lication"."""

    def __init__(self, keys: Sequence[tuple[str, str]], secrets: Sequence[str]) -> None:
        self._labels = {secret: label for secret, label in keys if secret}
        everything = set(self._labels) | {s for s in secrets if s}
        self._ordered = sorted(everything, key=len, reverse=True)  # at one place, a whole before any part of it
        self._runs = frozenset(s[i:i + KEY_RUN] for s in everything for i in range(len(s) - KEY_RUN + 1))

    def __bool__(self) -> bool:
        return bool(self._ordered)

    def __call__(self, text: str) -> str:
        present = [secret for secret in self._ordered if secret in text]  # usually none: no pattern at all
        if present:
            pattern = re.compile("|".join(map(_alternative, present)))  # re's own cache keeps a repeated one
            text = pattern.sub(lambda found: self._labels.get(found.group(), "[redacted]"), text)
        return mask_runs(text, self._runs)


def _alternative(secret: str) -> str:
    literal = re.escape(secret)
    return literal if len(secret) >= KEY_RUN else rf"(?<![A-Za-z0-9]){literal}(?![A-Za-z0-9])"


def mask_runs(text: str, runs: frozenset[str]) -> str:
    """``text`` with each occurrence of any of ``runs`` (``KEY_RUN`` characters each), and so any longer run of a
    secret, replaced by ``[redacted]``. Few runs (a key or two): each is looked for; many (a long URL's secrets):
    the text's windows are looked up instead, a cost of the text's length, not of the runs'."""
    spans: list[tuple[int, int]] = []
    if len(runs) <= 256:
        for run in runs:
            at = text.find(run)
            while at >= 0:
                spans.append((at, at + KEY_RUN))
                at = text.find(run, at + 1)
    elif runs:
        spans = [(at, at + KEY_RUN) for at in range(len(text) - KEY_RUN + 1) if text[at:at + KEY_RUN] in runs]
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
        found |= {url.user or "", url.password or "", url.raw_user or "", url.raw_password or "", pair}
        for encoding in ("utf-8", "latin-1"):  # aiohttp's Authorization: Basic is latin-1; others send UTF-8
            with contextlib.suppress(UnicodeEncodeError):
                found.add(base64.b64encode(pair.encode(encoding)).decode())
    for name, value in url.query.items():
        found |= {value, yarl.URL.build(query={name: value}).raw_query_string.split("=", 1)[1]}
    return sorted((s for s in found if len(s) >= 3), key=len, reverse=True)  # shorter: no secret, and would mangle the text
