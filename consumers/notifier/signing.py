"""Standard Webhooks signatures (https://www.standardwebhooks.com/), made by the ``standardwebhooks`` library.

Every delivery carries ``webhook-id`` (the job id, the same on every retry so
receivers can deduplicate), ``webhook-timestamp`` (the attempt's time) and
``webhook-signature``: one ``v1,<base64>`` per configured secret, separated by
spaces, so a receiver holding either the old or the new secret verifies it
while a secret is being rotated.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime

from standardwebhooks import Webhook

USER_AGENT = "streamcrew-notifier"


class Signer:
    """Builds the headers of one delivery attempt; with no secret the signature header is left out."""

    def __init__(self, secrets: Sequence[str]) -> None:
        self._webhooks = [Webhook(secret) for secret in secrets]

    @property
    def signs(self) -> bool:
        return bool(self._webhooks)

    def headers(self, msg_id: str, body: bytes, *, now_s: float | None = None) -> dict[str, str]:
        seconds = int(time.time() if now_s is None else now_s)
        headers = {
            "content-type": "application/json",
            "user-agent": USER_AGENT,
            "webhook-id": msg_id,
            "webhook-timestamp": str(seconds),
        }
        if self._webhooks:
            stamp = datetime.fromtimestamp(seconds, tz=UTC)
            text = body.decode()
            headers["webhook-signature"] = " ".join(w.sign(msg_id, stamp, text) for w in self._webhooks)
        return headers
