"""Tenant limits shared by every replica through Redis (`GRAPHGATE_REDIS_URL`).

The same interface as server/services/limits.py (`wait_s`/`take`, `acquire`/`release`/`slot`),
so the routes cannot tell them apart:

- rate: one token bucket per tenant, in a Redis hash, refilled and taken by a Lua script on
  Redis's own clock (`TIME`): every replica draws from the same bucket, atomically.
- concurrency: one counter per tenant, INCR to take a slot and DECR to give it back. The key
  expires `SLOT_TTL_S` after the tenant's last acquire, so slots that a killed replica held
  are given back once that tenant has been idle that long.

When Redis does not answer, each call falls back to this process's own limiter (logged): the
service keeps serving with per-process budgets instead of failing every request.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Final

import redis

from server.services.limits import (
    ConcurrencyLimiter,
    Limits,
    RateLimiter,
    TooManyConcurrent,
)

log = logging.getLogger("graphgate.limits")
SLOT_TTL_S: Final = 60

# KEYS[1] the bucket; ARGV rate per s, burst. Returns "0" (a token taken) or the seconds to wait.
_TAKE: Final = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local state = redis.call('HMGET', KEYS[1], 'tokens', 'updated')
local tokens = tonumber(state[1]) or burst
local updated = tonumber(state[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - updated) * rate)
local wait = 0
if tokens >= 1 - 1e-9 then
  tokens = math.max(0, tokens - 1)
else
  wait = (1 - tokens) / rate
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'updated', tostring(now))
redis.call('EXPIRE', KEYS[1], math.ceil(burst / rate) + 1)
return tostring(wait)
"""
# KEYS[1] the counter; ARGV limit, ttl. Returns the slots held after this acquire, or -1 (full).
_ACQUIRE: Final = """
local held = redis.call('INCR', KEYS[1])
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[2]))
if held > tonumber(ARGV[1]) then
  redis.call('DECR', KEYS[1])
  return -1
end
return held
"""
# Never below zero: a release after the key expired must not hand out a free slot later.
_RELEASE: Final = """
local held = tonumber(redis.call('GET', KEYS[1]) or '0')
if held > 0 then return redis.call('DECR', KEYS[1]) end
return 0
"""


class RedisRateLimiter(RateLimiter):
    """A token bucket per tenant, shared by every replica using the same Redis."""

    def __init__(self, client: redis.Redis, rate_per_s: float, burst: int) -> None:
        super().__init__(rate_per_s, burst)
        self._redis = client
        self._take = client.register_script(_TAKE)

    def wait_s(self, key: str) -> float:
        if self.unlimited:
            return 0.0
        try:
            answer = self._take(keys=[f"gg:rate:{key}"], args=[self.rate_per_s, self.burst])
        except redis.RedisError as error:
            log.warning("redis: rate limit of %s is per process for now: %s", key, error)
            return super().wait_s(key)
        return float(answer)


class RedisConcurrencyLimiter(ConcurrencyLimiter):
    """At most `limit` inference requests of a tenant in flight across every replica."""

    def __init__(self, client: redis.Redis, limit: int) -> None:
        super().__init__(limit)
        self._redis = client
        self._acquire = client.register_script(_ACQUIRE)
        self._release = client.register_script(_RELEASE)
        # Slots taken from the local fallback while Redis was down, given back there.
        self._local: dict[str, int] = {}
        self._local_lock = threading.Lock()

    def in_flight(self, key: str) -> int:
        try:
            return int(self._redis.get(f"gg:slots:{key}") or 0)
        except redis.RedisError:
            return super().in_flight(key)

    def acquire(self, key: str) -> None:
        if not self.limit:
            return
        try:
            held = int(self._acquire(keys=[f"gg:slots:{key}"], args=[self.limit, SLOT_TTL_S]))
        except redis.RedisError as error:
            log.warning("redis: concurrency limit of %s is per process for now: %s", key, error)
            super().acquire(key)
            with self._local_lock:
                self._local[key] = self._local.get(key, 0) + 1
            return
        if held < 0:
            raise TooManyConcurrent(
                f"expected at most {self.limit} concurrent inference requests per tenant, got more",
                self.RETRY_AFTER_S,
            )

    def release(self, key: str) -> None:
        if not self.limit:
            return
        with self._local_lock:
            local = self._local.get(key, 0)
            if local:
                self._local[key] = local - 1
        if local:
            super().release(key)
            return
        try:
            self._release(keys=[f"gg:slots:{key}"])
        except redis.RedisError as error:  # the key's TTL gives the slot back
            log.warning("redis: could not release a slot of %s: %s", key, error)


def redis_limits(client: redis.Redis, local: Limits) -> Limits:
    """`local` (what Limits.build made from the settings) with its rate and concurrency limits
    kept in Redis, and the same budgets."""
    return dataclasses.replace(
        local,
        rate=RedisRateLimiter(client, local.rate.rate_per_s, local.rate.burst),
        concurrency=RedisConcurrencyLimiter(client, local.concurrency.limit),
    )
