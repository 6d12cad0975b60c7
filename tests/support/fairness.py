"""The fairness measure tests/server/test_fairness.py checks and benchmarks/bench_fairness.py
reports: against a real `graphgate serve`, tenant A floods it with checks of a large program
and with inference clients (in a process of its own, so that its client threads do not share
the measuring client's interpreter lock) while tenant B's latency is sampled, idle and under
that load.

The bound (benchmarks/bench_fairness.py checks it; the tests check progress and order): B's p99
under load at most `RATIO_BOUND` times its idle p99 plus `SLACK_MS`."""

from __future__ import annotations

import math
import multiprocessing
import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Final

import httpx2

from tests.support.api import ADMIN_TOKEN, auth, post_tenant
from tests.support.builders import affine, large_program
from tests.support.served import Server
from tests.support.uploads import post_model

RATIO_BOUND: Final = 3.0
# The full size (`-m soak`, run on a quiet machine) on 2 CPUs (benchmarks/results/fairness.md):
# B's loaded p99 108 ms against an idle p99 of 2.9 ms on a quiet machine (0.2-1.4 s while other
# work loaded it to 10-20); the CPUs' share alone (2 spinning processes, no requests) took B's
# p99 from 3.8 ms to 12.3 ms. The bound is the issue's 3x plus what the shared event loop and
# CPUs cost at that size, with about 3x room over the quiet figure: it catches starvation (a
# queue in front of B: B's p99 was 6 s when compiles held every worker, 777 ms before refused
# checks stopped parsing their bodies), not the goal's 3x, which needs the load generator off
# the server's CPUs.
SLACK_MS: Final = 300.0
LATENCY_METRIC: Final = "graphgate_inference_latency_seconds"
INFER: Final = {
    "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1.0, 2.0, 3.0, 4.0]}]
}


@dataclass(frozen=True, slots=True)
class Load:
    checks: int  # tenant A's concurrent /v1/check clients
    inferences: int  # tenant A's concurrent inference clients
    program_ops: int  # ops of the program A checks
    samples: int  # tenant B's requests measured, idle and under load


SMALL: Final = Load(checks=8, inferences=16, program_ops=1000, samples=150)
FULL: Final = Load(checks=40, inferences=64, program_ops=3000, samples=400)


@dataclass(frozen=True, slots=True)
class Figures:
    idle_ms: dict[str, float]  # p50 and p99 of B's inferences with the server otherwise idle
    loaded_ms: dict[str, float]  # the same while A's load runs
    list_idle_ms: dict[str, float]  # B's GET /v1/models, idle
    list_loaded_ms: dict[str, float]  # and under A's load
    b_statuses: dict[int, int]  # every status B got under load
    a_statuses: dict[str, int]  # what A's flood got ("check 429", "infer 200", ...)
    # B's inference p99 as the server measured it (arrival in the app to the end of the answer),
    # the upper edge of its /metrics histogram bucket, idle and loaded: the rest of B's time is
    # outside the app (the event loop's queue, the sockets, the CPUs the load shares)
    server_p99_s: tuple[float, float] = (math.nan, math.nan)
    flood_s: float = math.nan  # how long A's flood ran, once all its clients were going

    def a_rate_per_s(self) -> float:
        """A's answered requests a second (the flood's intensity)."""
        return sum(self.a_statuses.values()) / self.flood_s

    def summary(self) -> str:
        def ms(p: dict[str, float]) -> str:
            return f"p50 {p['p50']:.1f} p99 {p['p99']:.1f} ms"

        return (
            f"B infer idle {ms(self.idle_ms)}, loaded {ms(self.loaded_ms)} (bound p99 "
            f"{self.bound_ms():.1f}); B list idle {ms(self.list_idle_ms)}, loaded "
            f"{ms(self.list_loaded_ms)}; B server-side p99 <= {self.server_p99_s[0] * 1e3:g} / "
            f"{self.server_p99_s[1] * 1e3:g} ms; B {self.b_statuses}; A {self.a_statuses} "
            f"({self.a_rate_per_s():.0f}/s)"
        )

    def bound_ms(self, slack_ms: float = SLACK_MS) -> float:
        return RATIO_BOUND * self.idle_ms["p99"] + slack_ms


def _flood(url: str, key: str, load: Load, running: Any, stop: Any, statuses: Any) -> None:
    """Tenant A's load (runs in its own process): checks and inferences until `stop` is set;
    `running` is set once every one of its clients has had an answer."""
    program = large_program(load.program_ops)
    counts: Counter[str] = Counter()
    lock = threading.Lock()

    def loop(kind: str) -> None:
        with httpx2.Client(base_url=url, headers=auth(key), timeout=120) as client:
            while not stop.is_set():
                try:
                    if kind == "check":
                        answer = client.post("/v1/check", files={"program": program.program})
                    else:
                        answer = client.post("/v2/models/m/infer", json=INFER)
                    outcome = str(answer.status_code)
                except httpx2.HTTPError as e:
                    outcome = type(e).__name__
                with lock:
                    counts[f"{kind} {outcome}"] += 1
                    if sum(counts.values()) >= load.checks + load.inferences:
                        running.set()
                if outcome in ("429", "503"):  # back off as Retry-After asks, briefly
                    time.sleep(0.05)

    threads = [threading.Thread(target=loop, args=("check",)) for _ in range(load.checks)]
    threads += [threading.Thread(target=loop, args=("infer",)) for _ in range(load.inferences)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    statuses.update(counts)


def percentiles(samples: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(samples, n=100)
    return {"p50": statistics.median(samples) * 1e3, "p99": cuts[98] * 1e3}


def measure_tenant(
    url: str, key: str, samples: int
) -> tuple[list[float], list[float], Counter[int]]:
    """B's inference latencies, its model-list latencies (one in ten), and its statuses."""
    infer, listing, statuses = [], [], Counter[int]()
    with httpx2.Client(base_url=url, headers=auth(key), timeout=120) as client:
        for i in range(samples):
            start = time.perf_counter()
            answer = client.post("/v2/models/m/infer", json=INFER)
            infer.append(time.perf_counter() - start)
            statuses[answer.status_code] += 1
            if i % 10 == 0:
                start = time.perf_counter()
                statuses[client.get("/v1/models").status_code] += 1
                listing.append(time.perf_counter() - start)
    return infer, listing, statuses


def _latency_buckets(url: str, tenant: str) -> dict[float, float]:
    """The tenant's inference latency histogram from /metrics: bucket upper edge -> count."""
    text = httpx2.get(f"{url}/metrics", headers=auth(ADMIN_TOKEN), timeout=60).text
    buckets: dict[float, float] = {}
    for line in text.splitlines():
        if line.startswith(f"{LATENCY_METRIC}_bucket{{") and f'tenant="{tenant}"' in line:
            edge = float(line.split('le="')[1].split('"')[0])
            buckets[edge] = buckets.get(edge, 0.0) + float(line.rsplit(" ", 1)[1])
    return buckets


def _p99_edge(before: dict[float, float], after: dict[float, float]) -> float:
    """The upper edge of the bucket holding the p99 of the requests between two readings."""
    counts = {edge: after[edge] - before.get(edge, 0.0) for edge in sorted(after)}
    total = counts.get(math.inf, 0.0)
    return next((edge for edge, n in counts.items() if n >= 0.99 * total), math.nan)


def measure_fairness(server: Server, load: Load) -> Figures:
    """Sets up tenants A and B on `server`, measures B idle, then B under A's flood."""
    key_a, key_b = post_tenant(server, "tenant-a"), post_tenant(server, "tenant-b")
    for key in (key_a, key_b):
        assert post_model(server, key, built=affine().built()).status_code == 201
    measure_tenant(server.url, key_b, 50)  # warm: model loaded in the workers, connection open
    before_idle = _latency_buckets(server.url, "tenant-b")
    idle, list_idle, _ = measure_tenant(server.url, key_b, load.samples)
    after_idle = _latency_buckets(server.url, "tenant-b")

    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager:
        running, stop, a_statuses = manager.Event(), manager.Event(), manager.dict()
        flood = ctx.Process(
            target=_flood, args=(server.url, key_a, load, running, stop, a_statuses)
        )
        started = time.perf_counter()
        flood.start()
        try:
            assert running.wait(120), "tenant A's load never got going"
            started = time.perf_counter()
            time.sleep(1.0)  # its clients all busy, its checks compiling
            loaded, list_loaded, b_statuses = measure_tenant(server.url, key_b, load.samples)
            after_loaded = _latency_buckets(server.url, "tenant-b")
        finally:
            stop.set()
            flood_s = time.perf_counter() - started
            flood.join(120)
        assert flood.exitcode == 0, f"the load process failed: exit {flood.exitcode}"
        a_counts = dict(a_statuses)
    return Figures(
        percentiles(idle),
        percentiles(loaded),
        percentiles(list_idle),
        percentiles(list_loaded),
        dict(b_statuses),
        a_counts,
        (_p99_edge(before_idle, after_idle), _p99_edge(after_idle, after_loaded)),
        flood_s,
    )
