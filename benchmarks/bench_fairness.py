"""Fairness under one tenant's flood: writes benchmarks/results/fairness.md.

Against a real `graphgate serve` on loopback: tenant B's inference and model-list latency with
the server otherwise idle (the baseline, same run), then while tenant A runs concurrent checks of
a large program and concurrent inference clients (tests/support/fairness.py has the load
and the bound). Each configuration in CONFIGS is a fresh server.
Usage: PYTHONPATH=. .venv/bin/python benchmarks/bench_fairness.py [--small]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from tests.support.api import post_tenant
from tests.support.builders import affine
from tests.support.fairness import (
    FULL,
    RATIO_BOUND,
    SLACK_MS,
    SMALL,
    Figures,
    Load,
    measure_fairness,
    measure_tenant,
    percentiles,
)
from tests.support.served import Server
from tests.support.uploads import post_model

T = TypeVar("T")
RESULTS = Path(__file__).parent / "results" / "fairness.md"
# Settings compared (environment of the server): the defaults (2 workers, so 1 compile thread:
# server/services/limits.compile_threads), and 3 workers with 2 compile threads.
CONFIGS: dict[str, dict[str, str]] = {
    "defaults (2 workers, 1 compiling at most)": {},
    "3 workers, 2 compile threads": {"GRAPHGATE_WORKERS": "3", "GRAPHGATE_COMPILE_THREADS": "2"},
}


def _spin(stop: Any) -> None:
    while not stop.is_set():
        pass


def measure_cpu_floor(server: Server, load: Load) -> tuple[dict[str, float], dict[str, float]]:
    """B's inference p50/p99 idle, then while one process a CPU spins and nothing else asks
    the server anything: what sharing the CPUs alone costs B, with no queue to be fair in."""
    key = post_tenant(server, "tenant-b")
    assert post_model(server, key, built=affine().built()).status_code == 201
    measure_tenant(server.url, key, 50)
    idle, _, _ = measure_tenant(server.url, key, load.samples)
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    spinners = [ctx.Process(target=_spin, args=(stop,)) for _ in range(os.cpu_count() or 1)]
    for spinner in spinners:
        spinner.start()
    try:
        time.sleep(1.0)
        busy, _, _ = measure_tenant(server.url, key, load.samples)
    finally:
        stop.set()
        for spinner in spinners:
            spinner.join(30)
    return percentiles(idle), percentiles(busy)


def _started(tmp: Path) -> Server:
    """A started server; a start slower than Server.start waits (a busy machine) is stopped
    and tried once more."""
    for attempt in (1, 2):
        server = Server(tmp / f"data{attempt}")
        try:
            server.start()
            return server
        except AssertionError:
            server.stop()
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def _fresh_server(env: dict[str, str], use: Callable[[Server], T]) -> T:
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            server = _started(Path(tmp))
            try:
                return use(server)
            finally:
                server.stop()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run(env: dict[str, str], small: bool) -> Figures:
    return _fresh_server(env, lambda server: measure_fairness(server, SMALL if small else FULL))


def row(name: str, f: Figures) -> str:
    ratio = f.loaded_ms["p99"] / f.idle_ms["p99"]
    met = "yes" if f.loaded_ms["p99"] <= f.bound_ms() else "no"
    return (
        f"| {name} | {f.idle_ms['p50']:.1f} / {f.idle_ms['p99']:.1f} | "
        f"{f.loaded_ms['p50']:.1f} / {f.loaded_ms['p99']:.1f} | {ratio:.1f}x | {met} | "
        f"{f.server_p99_s[0] * 1e3:g} / {f.server_p99_s[1] * 1e3:g} | "
        f"{f.list_idle_ms['p99']:.1f} / {f.list_loaded_ms['p99']:.1f} | "
        f"{sorted(f.b_statuses.items())} | {dict(sorted(f.a_statuses.items()))} ({f.a_rate_per_s():.0f}/s) |"
    )


def _notes() -> str:
    """The results file's hand-written sections (from its first `## ` heading on): a rerun
    replaces the figures and keeps the analysis."""
    text = RESULTS.read_text() if RESULTS.exists() else ""
    start = text.find("\n## ")
    return "" if start < 0 else text[start:]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--small", action="store_true", help="the bounded size the tests run")
    args = parser.parse_args()
    load = SMALL if args.small else FULL
    rows = [row(name, run(env, args.small)) for name, env in CONFIGS.items()]
    idle, busy = _fresh_server({}, lambda server: measure_cpu_floor(server, load))
    floor = (
        f"B infer idle p50 / p99 {idle['p50']:.1f} / {idle['p99']:.1f} ms; with "
        f"{os.cpu_count()} processes spinning (no requests) {busy['p50']:.1f} / "
        f"{busy['p99']:.1f} ms ({busy['p99'] / idle['p99']:.1f}x)"
    )
    lines = [
        "# Fairness: tenant B while tenant A floods (benchmarks/bench_fairness.py)",
        "",
        f"{os.cpu_count()} CPUs, load generator on the same machine. Tenant A: {load.checks} "
        f"concurrent `/v1/check` clients on a {load.program_ops}-op program and "
        f"{load.inferences} inference clients (1x4 affine), all in one process. Tenant B: "
        f"{load.samples} sequential inferences (and a `GET /v1/models` every tenth) idle, then "
        "under A's load. Bound: B's loaded p99 <= "
        f"{RATIO_BOUND:g} x idle p99 + {SLACK_MS:g} ms (tests/server/test_fairness.py).",
        "",
        "| server | B infer idle p50 / p99 ms | B infer loaded p50 / p99 ms | p99 ratio | "
        "within bound | B infer p99 in the app, idle / loaded ms (at most: histogram edge) | "
        "B list p99 idle / loaded ms | B statuses | A statuses (A's answers a second) |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"The CPUs' share alone (defaults, a fresh server, no tenant A): {floor}.",
    ]
    RESULTS.write_text("\n".join(lines) + "\n" + _notes())
    print("\n".join(lines))


if __name__ == "__main__":
    main()
