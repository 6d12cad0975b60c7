"""Per-tenant request rate (token bucket), concurrency limits and the compile queue, and the
bounds of all tenants together (no FastAPI here).

Each tenant has its own bucket and its own in-flight counters, so one tenant's load never
throttles another (429); the global bounds keep the whole server's queue finite (503
`OVERLOADED`). The locks guard a few arithmetic operations only: safe from the threadpool and
from the event loop alike.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from server.errors import PayloadTooLarge, ServiceError, TooManyRequests

T = TypeVar("T")

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


class TooManyCompiles(TooManyRequests):
    """The tenant already has its maximum number of uploads, checks and model loads (a model
    compiled again after it left the cache) compiling or waiting (its quota
    `max_concurrent_uploads`)."""

    code = "TOO_MANY_COMPILES"
    reason = "compiles"


class Overloaded(ServiceError):
    """The server's queue of all tenants' inferences, or of their compiles, is full; Retry-After
    says when to try again."""

    code = "OVERLOADED"

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class StorageQuotaExceeded(PayloadTooLarge):
    """An upload that would take the tenant's stored artifact bytes past its quota
    `max_storage_bytes` (default `GRAPHGATE_TENANT_MAX_STORAGE_BYTES`)."""

    code = "STORAGE_QUOTA"


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
        # Per-key (rate, burst) set by an operator (server/services/policies.py); one dict read.
        self._overrides: dict[str, tuple[float, int]] = {}

    def override(self, key: str, rate_per_s: float | None, burst: int | None) -> None:
        """`key`'s own rate and burst (None: the default); its bucket starts over full."""
        with self._lock:
            self._buckets.pop(key, None)
            if rate_per_s is None and burst is None:
                self._overrides.pop(key, None)
            else:
                rate = self.rate_per_s if rate_per_s is None else rate_per_s
                self._overrides[key] = (rate, self.burst if burst is None else burst)

    def limits_of(self, key: str) -> tuple[float, int]:
        return self._overrides.get(key, (self.rate_per_s, self.burst))

    @property
    def unlimited(self) -> bool:
        return self.rate_per_s == 0

    def wait_s(self, key: str) -> float:
        """Takes a token for `key` and returns 0.0, or takes nothing and returns the seconds
        until a token is available."""
        rate, burst = self._overrides.get(key, (self.rate_per_s, self.burst))
        if rate == 0:
            return 0.0
        with self._lock:
            now = self._clock()
            bucket = self._buckets.setdefault(key, _Bucket(float(burst), now))
            elapsed = max(0.0, now - bucket.updated)
            bucket.tokens = min(float(burst), bucket.tokens + elapsed * rate)
            bucket.updated = now
            if bucket.tokens >= 1.0 - _EPSILON:
                bucket.tokens = max(0.0, bucket.tokens - 1.0)
                return 0.0
            return (1.0 - bucket.tokens) / rate

    def take(self, key: str) -> None:
        """Takes a token for `key`, else raises RateLimited with a whole-second Retry-After."""
        wait = self.wait_s(key)
        if wait > 0:
            retry_after = max(1, math.ceil(wait - _EPSILON))
            rate, burst = self.limits_of(key)
            raise RateLimited(
                f"expected at most {rate:g} requests per second (burst {burst}) "
                f"per tenant, got more; retry in {retry_after} s",
                retry_after,
            )


class ConcurrencyLimiter:
    """At most `limit` slots held per key at once, and at most `total` held by all keys together;
    `limit` 0 means unlimited per key. Over `limit` is the key's own 429 (`TooManyConcurrent`, or
    `per_key_error`); over `total` is 503 `OVERLOADED`."""

    RETRY_AFTER_S: Final = 1

    def __init__(
        self,
        limit: int,
        total: int = 0,
        *,
        what: str = "concurrent inference requests",
        per_key_error: type[TooManyRequests] = TooManyConcurrent,
    ) -> None:
        if limit < 0 or total < 0:
            raise ValueError(
                f"expected a concurrency limit >= 0 and a total >= 0, got {limit}, {total}"
            )
        self.limit = limit
        self.total = total
        self.what = what
        self._per_key_error = per_key_error
        self._held: dict[str, int] = {}
        self._held_total = 0
        self._lock = threading.Lock()
        self._overrides: dict[str, int] = {}  # per-key limits set by an operator

    def override(self, key: str, limit: int | None) -> None:
        """`key`'s own limit (0: unlimited; None: the default)."""
        with self._lock:
            if limit is None:
                self._overrides.pop(key, None)
            else:
                self._overrides[key] = limit

    def in_flight(self, key: str) -> int:
        with self._lock:
            return self._held.get(key, 0)

    def in_flight_total(self) -> int:
        with self._lock:
            return self._held_total

    def acquire(self, key: str) -> None:
        """Holds a slot for `key`, else raises the per-key 429 or Overloaded."""
        with self._lock:
            held = self._room_for(key)
            self._held[key] = held + 1
            self._held_total += 1

    def acquire_own(self, key: str) -> None:
        """Holds a slot of `key`'s own limit only, after checking (not taking) that the server
        has room: the per-key 429 or Overloaded, as `acquire` would. `take_place` completes it."""
        with self._lock:
            self._held[key] = self._room_for(key) + 1

    def _room_for(self, key: str) -> int:
        """`key`'s slots held; raises when it has no slot left or the server no place."""
        held = self._held.get(key, 0)
        limit = self._overrides.get(key, self.limit)
        if limit and held >= limit:
            raise self._per_key_error(
                f"expected at most {limit} {self.what} per tenant, got {held + 1}",
                self.RETRY_AFTER_S,
            )
        self._check_room()
        return held

    def take_place(self) -> None:
        """Takes a place among the server's `total` for a slot `acquire_own` holds."""
        with self._lock:
            self._check_room()
            self._held_total += 1

    def _check_room(self) -> None:
        if self.total and self._held_total >= self.total:
            raise Overloaded(
                f"expected at most {self.total} {self.what} on this server, got "
                f"{self._held_total + 1}; retry in {self.RETRY_AFTER_S} s",
                self.RETRY_AFTER_S,
            )

    def release(self, key: str) -> None:
        """Gives back `key`'s slot and its place in the total."""
        self._give_back(key, placed=True)

    def release_own(self, key: str) -> None:
        """Gives back a slot `acquire_own` took and `take_place` never completed."""
        self._give_back(key, placed=False)

    def _give_back(self, key: str, *, placed: bool) -> None:
        with self._lock:
            held = self._held.get(key, 0) - 1
            if held < 0:
                raise RuntimeError(f"release without acquire for {key!r}")
            if held:
                self._held[key] = held
            else:
                del self._held[key]  # idle tenants cost no memory
            if placed:
                self._held_total -= 1

    @contextmanager
    def slot(self, key: str) -> Iterator[None]:
        self.acquire(key)
        try:
            yield
        finally:
            self.release(key)


class FairPool:
    """Threads that take queued work fairly by tenant: each tenant's work stays in its own
    order, and the next taken is the head of the tenant that had the fewest taken since its
    queue last ran empty (the oldest queue on a tie). A tenant with 40 compiles queued thus
    waits behind one of every other tenant's instead of in front of them all (a plain executor
    is one FIFO), and a newcomer goes next."""

    def __init__(self, threads: int, name: str) -> None:
        self._queues: dict[str, deque[tuple[Future[Any], Callable[[], Any]]]] = {}
        self._taken: dict[str, int] = {}
        self._cond = threading.Condition()
        self._closed = False
        self._threads = [
            threading.Thread(target=self._serve, name=f"{name}-{i}", daemon=True)
            for i in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, tenant: str, work: Callable[[], T]) -> Future[T]:
        future: Future[T] = Future()
        with self._cond:
            if self._closed:
                raise RuntimeError("the compile pool is shut down")
            self._queues.setdefault(tenant, deque()).append((future, work))
            self._cond.notify()
        return future

    def shutdown(self) -> None:
        with self._cond:
            self._closed = True
            dropped = [future for queue in self._queues.values() for future, _ in queue]
            self._queues.clear()
            self._cond.notify_all()
        for future in dropped:
            future.cancel()

    def _serve(self) -> None:
        while (taken := self._next()) is not None:
            future, work = taken
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(work())
            except BaseException as error:  # handed to the waiter
                future.set_exception(error)

    def _next(self) -> tuple[Future[Any], Callable[[], Any]] | None:
        with self._cond:
            while not self._queues and not self._closed:
                self._cond.wait()
            if not self._queues:
                return None
            tenant = min(self._queues, key=lambda t: self._taken.get(t, 0))
            queue = self._queues[tenant]
            taken = queue.popleft()
            self._taken[tenant] = self._taken.get(tenant, 0) + 1
            if not queue:  # its turn count starts over with its next queue
                del self._queues[tenant], self._taken[tenant]
            return taken


class CompileQueue:
    """Uploads, checks and the compiles of cache misses run here: a bounded queue (per tenant
    and in all) in front of a pool of its own, served round-robin by tenant (FairPool), so
    compile work never takes the threads, nor the queue places, of other routes, and one
    tenant's compiles never queue in front of another's.

    NOTE: the slot is taken before the work is queued and released when it ends, so a tenant's
    waiting uploads count against its cap: a flood of 40 checks is 2 compiling and 38 refused
    at once, not 38 queued in front of everyone else's.
    """

    def __init__(self, threads: int, per_tenant: int, total: int) -> None:
        self.slots = ConcurrencyLimiter(
            per_tenant,
            total,
            what="uploads, checks and model loads compiling or waiting",
            per_key_error=TooManyCompiles,
        )
        self._pool = FairPool(threads, "graphgate-compile")

    async def run(self, tenant: str, work: Callable[[], T]) -> T:
        """Runs `work` in the compile pool under one of `tenant`'s slots."""
        with self.slots.slot(tenant):
            return await self.run_held(tenant, work)

    def run_blocking(self, tenant: str, work: Callable[[], T]) -> T:
        """`run` from a thread that may wait (a model compiled again on a cache miss, from the
        inference path's resolve): under one of `tenant`'s slots, in its turn."""
        with self.slots.slot(tenant):
            return self._pool.submit(tenant, work).result()

    @contextmanager
    def admitted(self, tenant: str) -> Iterator[Admission]:
        """Holds one of `tenant`'s slots from before its request body is read (a refusal then
        costs no body: the 429, or the 503 when the server is full, comes first); the place
        among the server's total is taken by `Admission.run`, once the body is in.

        NOTE: a body still streaming holds its tenant's own slot only: a tenant's slow bodies
        fill its own cap, never the places of every tenant's compiles.
        """
        self.slots.acquire_own(tenant)
        admission = Admission(self, tenant)
        try:
            yield admission
        finally:
            if admission.placed:
                self.slots.release(tenant)
            else:
                self.slots.release_own(tenant)

    async def run_held(self, tenant: str, work: Callable[[], T]) -> T:
        """Runs `work` in the compile pool in `tenant`'s turn; the caller holds the tenant's
        slot and place."""
        return await asyncio.wrap_future(self._pool.submit(tenant, work))

    def shutdown(self) -> None:
        self._pool.shutdown()


class Admission:
    """A tenant's slot held by `CompileQueue.admitted`; `run` takes the server-wide place."""

    def __init__(self, queue: CompileQueue, tenant: str) -> None:
        self._queue = queue
        self._tenant = tenant
        self.placed = False

    async def run(self, work: Callable[[], T]) -> T:
        """Runs `work` in the compile pool, once the server has room (Overloaded if not)."""
        self._queue.slots.take_place()
        self.placed = True
        return await self._queue.run_held(self._tenant, work)


def compile_threads(threads: int, workers: int) -> int:
    """How many uploads and checks compile at once: `threads`, but at most one worker fewer
    than there are workers (and at least one).

    NOTE: compiles and inferences run in the same worker processes; with every worker compiling
    a large program, every tenant's inference waits for a compile to end. Measured with 2
    workers and one tenant's 8 checks of a 1,000-op program: another tenant's inference p99 went
    from 39 ms idle to 6 s with 2 compile threads, and stayed at its idle p99 with 1
    (benchmarks/results/fairness.md).
    """
    return max(1, min(threads, workers - 1))


@dataclass(frozen=True, slots=True)
class Limits:
    """The limits one app enforces, keyed by tenant id."""

    rate: RateLimiter
    concurrency: ConcurrencyLimiter
    compiles: CompileQueue = field(default_factory=lambda: CompileQueue(2, 0, 0))

    @classmethod
    def build(
        cls,
        rate_per_s: float,
        burst: int,
        max_concurrent: int,
        clock: Clock = time.monotonic,
        *,
        max_queued_inferences: int = 0,
        compiles: CompileQueue | None = None,
    ) -> Limits:
        return cls(
            RateLimiter(rate_per_s, burst, clock),
            ConcurrencyLimiter(max_concurrent, max_queued_inferences),
            compiles if compiles is not None else CompileQueue(2, 0, 0),
        )
