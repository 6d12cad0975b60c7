"""What the operator's per-tenant rules add to one inference request's hot path.

Usage: python benchmarks/bench_policy_overhead.py [--tenants N] [--runs N]

The request path reads three things the operator console made per tenant: the suspended set,
the tenant's own rate/burst and its own concurrency cap (server/http/deps.py, server/services/limits.py).
This times exactly those steps, in one process and one run, twice: with 100 tenants carrying
their own rules and one suspended (on), and with no per-tenant rules (off: the limiters' defaults,
an empty suspended set). The difference is the overhead; the goal is at most +0.05 ms a request.
Writes benchmarks/results/policy_overhead.md.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from server.services.limits import ConcurrencyLimiter, RateLimiter

RESULTS = Path(__file__).parent / "results" / "policy_overhead.md"


def _request(
    suspended: frozenset[str], rate: RateLimiter, slots: ConcurrencyLimiter, tenant: str
) -> Callable[[], None]:
    def one() -> None:
        if tenant in suspended:  # what deps.get_principal reads
            raise AssertionError("a suspended tenant in the benchmark")
        rate.take(tenant)
        slots.acquire(tenant)
        slots.release(tenant)

    return one


def _setup(rules: bool, tenants: int) -> Callable[[], None]:
    rate = RateLimiter(1e9, 1_000_000_000)
    slots = ConcurrencyLimiter(32, 256)
    suspended: frozenset[str] = frozenset()
    if rules:
        for i in range(tenants):
            rate.override(f"t{i}", 1e9, 1_000_000_000)
            slots.override(f"t{i}", 16)
        suspended = frozenset({f"t{tenants - 1}"})
    return _request(suspended, rate, slots, "t0")


def _per_call_us(fn: Callable[[], None], runs: int) -> float:
    start = time.perf_counter()
    for _ in range(runs):
        fn()
    return (time.perf_counter() - start) / runs * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tenants", type=int, default=100)
    parser.add_argument("--runs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    on, off = _setup(True, args.tenants), _setup(False, args.tenants)
    on_us: list[float] = []
    off_us: list[float] = []
    for i in range(args.rounds):  # interleaved, so the machine's noise hits both alike
        for fn, out in ((on, on_us), (off, off_us)) if i % 2 == 0 else ((off, off_us), (on, on_us)):
            out.append(_per_call_us(fn, args.runs))
    median_on, median_off = statistics.median(on_us), statistics.median(off_us)
    added_ms = (median_on - median_off) / 1000
    text = (
        "# Per-tenant rules on the inference hot path\n\n"
        f"`python benchmarks/bench_policy_overhead.py --tenants {args.tenants} --runs {args.runs}` "
        f"on {platform.machine()}, Python {platform.python_version()}: median of {args.rounds} "
        "interleaved rounds of the request's rule reads (suspended set, rate bucket, concurrency "
        "slot).\n\n"
        "| rules | per request |\n|---|---|\n"
        f"| {args.tenants} tenants with their own rate, burst and cap, one suspended | "
        f"{median_on:.2f} µs |\n"
        f"| none (defaults only) | {median_off:.2f} µs |\n\n"
        f"Added by the per-tenant rules: {added_ms:+.4f} ms a request (goal <= +0.05 ms: "
        f"{'met' if added_ms <= 0.05 else 'NOT met'}).\n"
    )
    RESULTS.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
