"""Settings of ``streamcrew notifier``, read once at the edge (``STREAMCREW_*``)."""

from __future__ import annotations

import binascii
from pathlib import Path
from typing import Annotated, Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator
from pydantic_settings import NoDecode
from standardwebhooks import Webhook
from standardwebhooks.webhooks import EmptyWebhookSecretError

from consumers.settings import ServesPartitions
from consumers.webhook_targets import AllowList

DEFAULT_NOTIFIER_METRICS_PORT = 9102


class Subscription(BaseModel):
    """An endpoint that receives every result, optionally only some agents and statuses."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)  # url and secret are secrets

    url: str = Field(min_length=1)
    agents: frozenset[str] | None = None
    statuses: frozenset[str] | None = None
    secret: SecretStr | None = Field(default=None, description="this endpoint's own whsec_ secret(s), space-separated")

    @field_validator("secret")
    @classmethod
    def _check_secret(cls, value: SecretStr | None) -> SecretStr | None:
        return check_secrets(value)

    @field_validator("url")
    @classmethod
    def _http(cls, value: str) -> str:
        if not value.lower().startswith(("http://", "https://")):
            raise ValueError("subscription url must be http:// or https://")  # never quoted: it may carry credentials
        return value

    def matches(self, agent: str, status: str) -> bool:
        return (self.agents is None or agent in self.agents) and (self.statuses is None or status in self.statuses)


def check_secrets(value: SecretStr | None) -> SecretStr | None:
    """Space-separated ``whsec_`` secrets, each valid base64 after the prefix; blank is None."""
    if value is None:
        return None
    parts = value.get_secret_value().split()
    if not parts:
        return None
    for n, part in enumerate(parts, 1):
        if not part.startswith("whsec_"):
            raise ValueError(f"secret {n} does not start with 'whsec_'")
        try:
            Webhook(part)
        except (binascii.Error, EmptyWebhookSecretError, ValueError):
            raise ValueError(f"secret {n} is not 'whsec_' followed by base64") from None
    return value


def json_type(value: object) -> str:
    """The JSON name of a parsed value's type, to say what is wrong without quoting it."""
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _json_or_file(value: object, what: str, opening: str) -> object:
    """A JSON text, or the path of a file holding one (so secrets need not sit in the environment)."""
    if not isinstance(value, str | bytes):
        return value
    text = (value.decode() if isinstance(value, bytes) else value).strip()
    if not text:
        return None
    if not text.startswith(opening):
        path = Path(text)
        if not path.is_file():
            raise ValueError(f"{what}: neither JSON nor the path of a file")
        text = path.read_text()
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"{what} are not JSON: {exc}") from None


class NotifierSettings(ServesPartitions):
    """``streamcrew notifier``: every field is also a ``STREAMCREW_*`` variable (``--partitions`` narrows it like the worker)."""

    webhook_secret: SecretStr | None = Field(
        default=None, description="whsec_ secret(s), space-separated; every delivery is signed with each (rotation)"
    )
    webhook_tenant_secrets: Annotated[dict[str, SecretStr], NoDecode] = Field(
        default_factory=dict,
        description='JSON {"tenant": "whsec_... [whsec_...]"}, or a file holding it: a tenant\'s events are signed with its own secret(s) instead',
    )
    allow_private: bool = Field(default=False, description="deliver to loopback, private and link-local addresses too")
    allow_list: AllowList = Field(
        default_factory=list, description="hosts (exact, or '.example.com' for subdomains), IPs and CIDRs always allowed"
    )
    max_attempts: int = Field(default=8, ge=1, le=100, description="delivery attempts per URL, the first included")
    backoff_s: float = Field(default=5.0, ge=0, description="first retry delay, doubled per attempt, with jitter")
    backoff_max_s: float = Field(default=3600.0, ge=0, description="longest retry delay, also the cap on Retry-After")
    connect_timeout_s: float = Field(default=5.0, gt=0, description="seconds to connect to an endpoint")
    timeout_s: float = Field(default=15.0, gt=0, description="seconds one delivery attempt may take in total, DNS included")
    dns_timeout_s: float = Field(default=2.0, gt=0, description="seconds one DNS lookup may take; failures are cached for 10 s")
    concurrency: int = Field(default=200, ge=1, le=100_000, description="deliveries in flight at once")
    per_endpoint_concurrency: int = Field(default=10, ge=1, le=10_000, description="deliveries in flight per endpoint (scheme, host, port), in result order")
    metrics_port: int = Field(default=DEFAULT_NOTIFIER_METRICS_PORT, ge=0, le=65535, description="port of /metrics; 0 = off")
    grace_s: float = Field(default=20.0, ge=0, description="seconds a draining notifier lets deliveries finish")
    subscriptions: Annotated[list[Subscription], NoDecode] = Field(
        default_factory=list, description="JSON list of {url, agents?, statuses?}, or the path of a file holding it"
    )
    log_level: str = Field(default="info", description="debug, info, warning or error")

    @property
    def webhook_secrets(self) -> list[str]:
        """The default secrets: events of tenants without their own, and subscriptions without their own."""
        return self.webhook_secret.get_secret_value().split() if self.webhook_secret else []

    @property
    def tenant_secrets(self) -> dict[str, list[str]]:
        return {tenant: secret.get_secret_value().split() for tenant, secret in self.webhook_tenant_secrets.items()}

    @property
    def subscription_secrets(self) -> dict[str, list[str]]:
        """Every subscription's URL with its own secrets; empty when it has none (then the default ones sign)."""
        with_secret_last = sorted(self.subscriptions, key=lambda s: s.secret is not None)  # a URL listed twice keeps a secret
        return {s.url: s.secret.get_secret_value().split() if s.secret is not None else [] for s in with_secret_last}

    @field_validator("webhook_secret")
    @classmethod
    def _check_secrets(cls, value: SecretStr | None) -> SecretStr | None:
        return check_secrets(value)

    @field_validator("webhook_tenant_secrets", mode="before")
    @classmethod
    def _load_tenant_secrets(cls, value: object) -> object:
        loaded = _json_or_file(value, "webhook tenant secrets", "{")
        return {} if loaded is None else loaded

    @field_validator("webhook_tenant_secrets")
    @classmethod
    def _check_tenant_secrets(cls, value: dict[str, SecretStr]) -> dict[str, SecretStr]:
        for tenant, secret in value.items():
            try:
                if check_secrets(secret) is None:
                    raise ValueError("no secret")
            except ValueError as exc:
                raise ValueError(f"tenant {tenant[:40]!r}: {exc}") from None
        return value

    @field_validator("subscriptions", mode="before")
    @classmethod
    def _load_subscriptions(cls, value: object) -> object:
        """A JSON list or a file holding one; errors say what is wrong, never quote it (secrets ride in it)."""
        if not isinstance(value, str | bytes):
            return value
        text = (value.decode() if isinstance(value, bytes) else value).strip()
        if not text:
            return []
        if not text.startswith(("[", "{")):
            path = Path(text)
            if not path.is_file():
                raise ValueError("subscriptions: the value is neither a JSON list nor a file")
            text = path.read_text()
        try:
            parsed: Any = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"subscriptions are not JSON: {exc}") from None
        if not isinstance(parsed, list):
            raise ValueError(f"subscriptions must be a JSON list of objects, got a JSON {json_type(parsed)}")
        return parsed
