"""A per-caller token bucket kept in Redis, so every gateway replica draws from the same bucket."""

from __future__ import annotations

import math
from dataclasses import dataclass

from redis.asyncio import Redis

from streams.keys import Keys
from streams.scripts import NodeScript

# Redis' own clock (TIME) keeps replicas on different hosts consistent.
# KEYS[1] bucket hash; ARGV rate per second, burst, cost. Returns {allowed 1|0, retry after ms}.
TOKEN_BUCKET = """
local rate, burst, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local b = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens, ts = tonumber(b[1]), tonumber(b[2])
if tokens == nil or ts == nil then tokens, ts = burst, now end
tokens = math.min(burst, tokens + math.max(0, now - ts) * rate / 1000)
local allowed, wait = 0, 0
if tokens >= cost then
  tokens = tokens - cost
  allowed = 1
else
  wait = math.ceil((cost - tokens) * 1000 / rate)
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst * 1000 / rate) + 1000)
return {allowed, wait}
"""


@dataclass(frozen=True, slots=True)
class Verdict:
    allowed: bool
    retry_after_s: int


class RateLimiter:
    """``rate_per_s`` tokens a second, at most ``burst`` saved up; a rate of 0 turns it off."""

    def __init__(self, redis: Redis, keys: Keys, *, rate_per_s: float, burst: int) -> None:
        self.keys = keys
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._script = NodeScript(redis, TOKEN_BUCKET)  # a NOSCRIPT loads it on the bucket's master only (streams.scripts)

    @property
    def enabled(self) -> bool:
        return self.rate_per_s > 0

    async def take(self, bucket: str) -> Verdict:
        """Take one token from ``bucket``; Retry-After is whole seconds, at least 1."""
        if not self.enabled:
            return Verdict(True, 0)
        allowed, wait_ms = await self._script(keys=[self.keys.ratelimit(bucket)], args=[self.rate_per_s, self.burst, 1])
        return Verdict(bool(int(allowed)), max(1, math.ceil(int(wait_ms) / 1000)))
