"""What every request handler shares: settings, one Redis client, the producer, keys, limits and webhook rules."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request
from redis.asyncio import Redis

from consumers.gateway.auth import KeyRing
from consumers.gateway.batching import PublishBatcher
from consumers.gateway.large_bodies import MAX_WAIT_SHARE, LargeBodyTurns
from consumers.gateway.ratelimit import RateLimiter
from consumers.gateway.settings import GatewaySettings
from consumers.gateway.streamslots import StreamSlots
from consumers.webhook_targets import TargetRules
from streams.keys import Keys
from streams.producer import Producer


@dataclass(slots=True)
class GatewayState:
    settings: GatewaySettings
    redis: Redis
    keys: Keys
    producer: Producer
    keyring: KeyRing
    limiter: RateLimiter
    batcher: PublishBatcher
    streams: StreamSlots
    webhook_rules: TargetRules
    large_bodies: LargeBodyTurns

    @classmethod
    def build(cls, settings: GatewaySettings, redis: Redis) -> GatewayState:
        keys = Keys(settings.prefix)
        producer = Producer(redis, keys, max_request_bytes=settings.max_request_bytes, partitions=settings.partitions)
        return cls(
            settings=settings, redis=redis, keys=keys, producer=producer,
            keyring=KeyRing(settings.key_tenants()),
            limiter=RateLimiter(redis, keys, rate_per_s=settings.rate_limit_per_s, burst=settings.effective_burst),
            batcher=PublishBatcher(producer),
            streams=StreamSlots(settings.max_event_streams_per_key),
            webhook_rules=TargetRules(allow_private=settings.allow_private, allow_list=settings.allow_list),
            large_bodies=LargeBodyTurns(max_wait_s=settings.request_timeout_s * MAX_WAIT_SHARE),
        )


async def gateway_state(request: Request) -> GatewayState:
    state: GatewayState = request.app.state.gateway
    return state
