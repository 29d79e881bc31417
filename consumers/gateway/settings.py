"""Settings of ``streamcrew gateway``: every field is also a ``STREAMCREW_*`` variable."""

from __future__ import annotations

import math
from typing import Annotated

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import NoDecode

from consumers.webhook_targets import AllowList
from streams.config import StreamSettings

DEFAULT_GATEWAY_PORT = 8000


def _split(value: object) -> object:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


class GatewaySettings(StreamSettings):
    """The HTTP gateway; ``api_keys`` and ``known_agents`` are comma-separated in the environment."""

    host: str = Field(default="127.0.0.1", description="address to bind; 0.0.0.0 to serve other hosts")
    port: int = Field(default=DEFAULT_GATEWAY_PORT, ge=0, le=65535, description="port to listen on")
    api_keys: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list,
        description="accepted bearer keys, 'key' or 'key:tenant' to bind a tenant; empty = no auth",
    )
    known_agents: Annotated[list[str] | None, NoDecode] = Field(
        default=None, description="agents POST /jobs accepts; unset = any agent name",
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="browser origins allowed to call the API (CORS), '*' for any; empty = none",
    )
    trusted_proxies: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="proxy addresses (IPs or CIDRs, '*' for any) whose X-Forwarded-For/-Proto name the client; empty = trust none",
    )
    max_body_bytes: int = Field(default=2 * 1_048_576, gt=0, description="largest HTTP request body accepted (413 above)")
    rate_limit_per_s: float = Field(default=0.0, ge=0, description="requests per second per key (token bucket in Redis); 0 = off")
    rate_limit_burst: int = Field(default=0, ge=0, description="bucket size; 0 = one second's worth of rate_limit_per_s")
    sse_poll_s: float = Field(default=0.1, gt=0, description="first interval between job-record polls of an event stream")
    sse_poll_max_s: float = Field(default=1.0, gt=0, description="longest interval between polls while a job does not change")
    sse_max_s: float = Field(default=300.0, gt=0, description="an event stream closes after this long; clients resume with Last-Event-ID")
    max_event_streams_per_key: int = Field(
        default=100, ge=0,
        description="event streams one API key (one client address when keys are off) may hold open at once in one gateway process; "
                    "429 above; 0 = no cap",
    )
    allow_private: bool = Field(
        default=False,
        description="the notifier's setting, read so both agree: webhooks to loopback, private and link-local IP literals "
                    "are accepted (else 422); set it alike for both",
    )
    allow_list: AllowList = Field(
        default_factory=list,
        description="the notifier's allow-list (hosts, '.example.com', IPs, CIDRs), read so both agree: a webhook to an IP literal "
                    "listed here is accepted; set it alike for both",
    )
    ready_timeout_s: float = Field(default=1.0, gt=0, description="seconds /readyz waits for Redis to answer PING")
    request_timeout_s: float = Field(
        default=5.0, gt=0, description="seconds a /jobs or /tasks call or an admin read may wait on Redis after its body arrived, and any "
                                 "rate-limited route on its bucket, and an event stream on each read of its job; then 503 (a stream's later "
                                 "reads: looked at again)",
    )
    head_timeout_s: float = Field(
        default=30.0, gt=0,
        description="seconds a request's line and headers may take to arrive (from their first byte, or from the "
                    "connection's opening); then 408 and the connection is closed, so connections that never finish a "
                    "request cannot hold the gateway's file descriptors",
    )
    keep_alive_s: float = Field(
        default=75.0, gt=0,
        description="seconds an idle HTTP connection stays open; keep it above the idle timeout of a proxy or load balancer "
                    "in front (60 s on many), or it reuses a connection just closed and answers 502",
    )
    access_log: bool = Field(default=False, description="log one line per HTTP request")
    log_level: str = Field(default="info", description="debug, info, warning or error")

    @field_validator("api_keys", "known_agents", "cors_origins", "trusted_proxies", mode="before")
    @classmethod
    def _split_commas(cls, value: object) -> object:
        return _split(value)

    @field_validator("api_keys")
    @classmethod
    def _each_key_bound_once(cls, value: list[SecretStr]) -> list[SecretStr]:
        """A slip must not widen access: ``key:`` (a template's unset tenant) would be an operator key, and a key
        listed twice would be bound to the last tenant named. Messages name the entry's position, never the key."""
        seen: set[str] = set()
        for n, entry in enumerate(value, 1):
            key, sep, tenant = entry.get_secret_value().partition(":")
            if not key:
                raise ValueError(f"entry {n} has no key before its ':'")
            if not all("!" <= c <= "~" for c in key):  # a client's header arrives as latin-1: such a key never matches
                raise ValueError(f"entry {n}'s key holds a character other than visible ASCII, which no Authorization header "
                                 "can carry so that it matches; use letters, digits and punctuation")
            if sep and not tenant:
                raise ValueError(f"entry {n} ends in ':' with no tenant, which would make it an operator key; "
                                 "write 'key' for an operator key or 'key:tenant' to bind one")
            if any(c.isspace() for c in tenant):
                raise ValueError(f"entry {n}'s tenant holds whitespace")
            if key in seen:
                raise ValueError(f"entry {n} repeats an earlier entry's key; list each key once, with one tenant at most")
            seen.add(key)
        return value

    @field_validator("known_agents")
    @classmethod
    def _empty_is_unset(cls, value: list[str] | None) -> list[str] | None:
        # STREAMCREW_KNOWN_AGENTS= (as a template leaves it) means any agent, as an empty API_KEYS means no auth.
        return value or None

    @property
    def effective_burst(self) -> int:
        return self.rate_limit_burst or max(1, math.ceil(self.rate_limit_per_s))

    def key_tenants(self) -> dict[str, str | None]:
        """Each accepted key with the tenant it is bound to (None when unbound)."""
        out: dict[str, str | None] = {}
        for entry in self.api_keys:
            key, sep, tenant = entry.get_secret_value().partition(":")
            out[key] = tenant if sep and tenant else None
        return out
