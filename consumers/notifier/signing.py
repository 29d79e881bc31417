"""Standard Webhooks signatures (https://www.standardwebhooks.com/), made by the ``standardwebhooks`` library.

Every delivery carries ``webhook-id`` (the job id, the same on every retry;
receivers deduplicate on it with the body's ``finished_at``, since a replayed
job's new result has it too), ``webhook-timestamp`` (the attempt's time) and
``webhook-signature``: one ``v1,<base64>`` per secret, separated by spaces, so
a receiver holding either the old or the new secret verifies it while a
secret is being rotated.

Which secrets sign: for a delivery to a subscription's URL, the subscription's
own, else the default ones; for a job's own ``webhook``, the secrets of the
tenant named in the event, else the default ones. A tenant's receiver
therefore never learns a secret that signs another tenant's events, and an
operator's subscription holding the default secret verifies every event.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from urllib.parse import quote

import orjson
from standardwebhooks import Webhook

USER_AGENT = "streamcrew-notifier"
_HEADER_SAFE = frozenset(chr(c) for c in range(0x21, 0x7F))


def header_id(msg_id: str) -> str:
    """``msg_id`` as a header value: printable ASCII as is, anything else percent-encoded (UTF-8)."""
    if msg_id and all(c in _HEADER_SAFE for c in msg_id):
        return msg_id
    return quote(msg_id, safe="") or "-"


class Signer:
    """Builds the headers of one delivery attempt; with no secret for it the signature header is left out.

    ``urls`` maps every subscription's URL to its own secrets (empty: the default ones).
    """

    def __init__(self, secrets: Sequence[str], *, tenants: Mapping[str, Sequence[str]] | None = None,
                 urls: Mapping[str, Sequence[str]] | None = None) -> None:
        self._default = [Webhook(s) for s in secrets]
        self._tenants = {t: [Webhook(s) for s in ss] for t, ss in (tenants or {}).items() if ss}
        # every subscription's URL: its own secrets, or the default ones, never a tenant's
        self._urls = {u: [Webhook(s) for s in ss] or self._default for u, ss in (urls or {}).items()}

    @property
    def signs(self) -> bool:
        """Whether every delivery is signed (a default secret is set)."""
        return bool(self._default)

    def _webhooks(self, body: bytes, url: str | None) -> list[Webhook]:
        if url is not None and (by_url := self._urls.get(url)) is not None:
            return by_url
        if self._tenants:
            try:
                event = orjson.loads(body)
            except orjson.JSONDecodeError:
                event = None
            tenant = event.get("tenant") if isinstance(event, dict) else None
            if isinstance(tenant, str) and (by_tenant := self._tenants.get(tenant)) is not None:
                return by_tenant
        return self._default

    def headers(self, msg_id: str, body: bytes, *, url: str | None = None, now_s: float | None = None) -> dict[str, str]:
        seconds = int(time.time() if now_s is None else now_s)
        wid = header_id(msg_id)
        headers = {
            "content-type": "application/json",
            "user-agent": USER_AGENT,
            "webhook-id": wid,
            "webhook-timestamp": str(seconds),
        }
        if webhooks := self._webhooks(body, url):
            stamp = datetime.fromtimestamp(seconds, tz=UTC)
            text = body.decode()
            headers["webhook-signature"] = " ".join(w.sign(wid, stamp, text) for w in webhooks)
        return headers
