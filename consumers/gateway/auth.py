"""Bearer keys, compared in constant time, each optionally bound to a tenant; then the rate limit."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from consumers.gateway.deadline import answered_within
from consumers.gateway.errors import ApiError

if TYPE_CHECKING:
    from consumers.gateway.state import GatewayState

bearer = HTTPBearer(auto_error=False, description="an API key from STREAMCREW_API_KEYS (when it is set)")
CHALLENGE = {"WWW-Authenticate": "Bearer"}


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is calling: ``bucket`` names their rate-limit bucket; ``tenant`` is stamped on their jobs."""

    bucket: str
    tenant: str | None


def _fingerprint(key: str) -> str:
    # Keys never appear in Redis key names or logs, only a short digest of them.
    return hashlib.sha256(key.encode()).hexdigest()[:16]


class KeyRing:
    """The accepted keys; an empty ring means authentication is off."""

    def __init__(self, key_tenants: dict[str, str | None]) -> None:
        self._keys = [(key.encode(), tenant, _fingerprint(key)) for key, tenant in key_tenants.items()]

    @property
    def enabled(self) -> bool:
        return bool(self._keys)

    def match(self, token: str) -> Caller | None:
        """The caller ``token`` belongs to; every key is compared, so timing tells nothing."""
        presented = token.encode()
        found: Caller | None = None
        for key, tenant, fingerprint in self._keys:
            if hmac.compare_digest(key, presented):
                found = Caller(bucket=f"key:{fingerprint}", tenant=tenant)
        return found


async def identify(request: Request) -> Caller:
    """401 without a valid key (when keys are configured), 429 over the rate; else who is calling.

    A valid key draws from its own bucket; a failed authentication from its client address's, so
    once that is empty, further failures from the address are 429 instead of 401.

    Called directly by POST /jobs (its hot path skips FastAPI's dependency solving) and through
    :func:`authorize` by every other route but the health checks.
    """
    state: GatewayState = request.app.state.gateway
    address = f"ip:{request.client.host if request.client else 'unknown'}"
    if state.keyring.enabled:
        scheme, _, token = (request.headers.get("authorization") or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            await _limit(state, address)
            raise ApiError(401, "unauthorized", "missing 'Authorization: Bearer <key>' header", headers=CHALLENGE)
        caller = state.keyring.match(token)
        if caller is None:
            await _limit(state, address)  # so keys cannot be guessed at the speed of the network
            raise ApiError(401, "unauthorized", "invalid API key", headers=CHALLENGE)
    else:
        caller = Caller(bucket=address, tenant=None)
    await _limit(state, caller.bucket)
    return caller


async def _limit(state: GatewayState, bucket: str) -> None:
    """429 when ``bucket`` has no token left; else one is taken. 503 when Redis does not answer within
    STREAMCREW_REQUEST_TIMEOUT_S, as the answer deadline (consumers.gateway.deadline) answers: /metrics, /openapi.json
    and the event streams are not under it, and waited out a hung Redis here (75 s)."""
    if state.limiter.enabled:
        verdict = await answered_within(state.settings.request_timeout_s, state.limiter.take(bucket))
        if not verdict.allowed:
            raise ApiError(429, "rate_limited", f"rate limit exceeded; retry after {verdict.retry_after_s}s",
                           headers={"Retry-After": str(verdict.retry_after_s)})


async def authorize(request: Request, _: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> Caller:
    """The dependency form of :func:`identify`; ``bearer`` puts the scheme in the OpenAPI document."""
    return await identify(request)


async def require_operator(caller: Annotated[Caller, Depends(authorize)]) -> Caller:
    """Queue-wide endpoints (stats, dead letters) are for keys not bound to a tenant."""
    if caller.tenant is not None:
        raise ApiError(403, "forbidden", "this key is bound to a tenant; queue-wide endpoints need an unbound key")
    return caller
