"""The notifier: POSTs every result to its job's webhook and to subscriptions, signed per Standard Webhooks.

See docs/webhooks.md for the format, retries, dead letters and the SSRF guard.
"""

from consumers.notifier.app import run_notifier
from consumers.notifier.dead import WebhookDeadLetter, list_webhook_dead, purge_webhook_dead, replay_webhook_dead
from consumers.notifier.settings import NotifierSettings, Subscription

__all__ = [
    "NotifierSettings", "Subscription", "WebhookDeadLetter", "list_webhook_dead", "purge_webhook_dead",
    "replay_webhook_dead", "run_notifier",
]
