"""Per-tenant request rate (token bucket) and concurrency limits (no FastAPI here).

Each tenant has its own bucket and its own in-flight counter, so one tenant's load never
throttles another. The locks guard a few arithmetic operations only: safe from the threadpool
and from the event loop alike.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final

from server.services.types import TooManyRequests

Clock = Callable[[], float]
# Float noise must not turn an exact 1.0 s wait into a 2 s Retry-After.
_EPSILON: Final = 1e-9


class RateLimited(TooManyRequests):
    """The tenant's request rate is over its token bucket; Retry-After says when a token is back."""

    code = "RATE_LIMITED"
    reason = "rate"


class TooManyConcurrent(TooManyRequests):
    """The tenant already has its maximum number of inference requests in flight."""

    code = "TOO_MANY_CONCURRENT"
    reason = "concurrency"


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated: float


class RateLimiter:
    """A token bucket per key: `rate_per_s` tokens a second, at most `burst` saved up.

    `rate_per_s` 0 means unlimited. A new key starts with a full bucket.
    """

    def __init__(self, rate_per_s: float, burst: int, clock: Clock = time.monotonic) -> None:
        if rate_per_s < 0 or (rate_per_s > 0 and burst < 1):
            raise ValueError(f"expected rate >= 0 and burst >= 1, got {rate_per_s}, {burst}")
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()

    @property
    def unlimited(self) -> bool:
        return self.rate_per_s == 0

    def wait_s(self, key: str) -> float:
        """Takes a token for `key` and returns 0.0, or takes nothing and returns the seconds
        until a token is available."""
        if self.unlimited:
            return 0.0
        with self._lock:
            now = self._clock()
            bucket = self._buckets.setdefault(key, _Bucket(float(self.burst), now))
            elapsed = max(0.0, now - bucket.updated)
            bucket.tokens = min(float(self.burst), bucket.tokens + elapsed * self.rate_per_s)
            bucket.updated = now
            if bucket.tokens >= 1.0 - _EPSILON:
                bucket.tokens = max(0.0, bucket.tokens - 1.0)
                return 0.0
            return (1.0 - bucket.tokens) / self.rate_per_s

    def take(self, key: str) -> None:
        """Takes a token for `key`, else raises RateLimited with a whole-second Retry-After."""
        wait = self.wait_s(key)
        if wait > 0:
            retry_after = max(1, math.ceil(wait - _EPSILON))
            raise RateLimited(
                f"expected at most {self.rate_per_s:g} requests per second (burst {self.burst}) "
                f"per tenant, got more; retry in {retry_after} s",
                retry_after,
            )


class ConcurrencyLimiter:
    """At most `limit` slots held per key at once; `limit` 0 means unlimited."""

    RETRY_AFTER_S: Final = 1

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise ValueError(f"expected a concurrency limit >= 0, got {limit}")
        self.limit = limit
        self._held: dict[str, int] = {}
        self._lock = threading.Lock()

    def in_flight(self, key: str) -> int:
        with self._lock:
            return self._held.get(key, 0)

    def acquire(self, key: str) -> None:
        """Holds a slot for `key`, else raises TooManyConcurrent."""
        with self._lock:
            held = self._held.get(key, 0)
            if self.limit and held >= self.limit:
                raise TooManyConcurrent(
                    f"expected at most {self.limit} concurrent inference requests per tenant, "
                    f"got {held + 1}",
                    self.RETRY_AFTER_S,
                )
            self._held[key] = held + 1

    def release(self, key: str) -> None:
        with self._lock:
            held = self._held.get(key, 0) - 1
            if held < 0:
                raise RuntimeError(f"release without acquire for {key!r}")
            if held:
                self._held[key] = held
            else:
                del self._held[key]  # idle tenants cost no memory

    @contextmanager
    def slot(self, key: str) -> Iterator[None]:
        self.acquire(key)
        try:
            yield
        finally:
            self.release(key)


@dataclass(frozen=True, slots=True)
class Limits:
    """The limits one app enforces, keyed by tenant id."""

    rate: RateLimiter
    concurrency: ConcurrencyLimiter

    @classmethod
    def build(
        cls, rate_per_s: float, burst: int, max_concurrent: int, clock: Clock = time.monotonic
    ) -> Limits:
        return cls(RateLimiter(rate_per_s, burst, clock), ConcurrencyLimiter(max_concurrent))
