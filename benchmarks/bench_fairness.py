"""Fairness under one tenant's flood: writes benchmarks/results/fairness.md.

Against a real `graphgate serve` on loopback: tenant B's inference and model-list latency with
the server otherwise idle (the baseline, same run), then while tenant A runs concurrent checks of
a large program and concurrent inference clients (tests/server/test_fairness.py has the load
and the bound). Each configuration in CONFIGS is a fresh server.
Usage: PYTHONPATH=. .venv/bin/python benchmarks/bench_fairness.py [--small]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from tests.server.test_fairness import FULL, RATIO_BOUND, SLACK_MS, SMALL, Figures, measure_fairness
from tests.server.test_serve_process import Server

RESULTS = Path(__file__).parent / "results" / "fairness.md"
# Settings compared (environment of the server): the defaults (2 workers, so 1 compile thread:
# server/services/limits.compile_threads), and 3 workers with 2 compile threads.
CONFIGS: dict[str, dict[str, str]] = {
    "defaults (2 workers, 1 compiling at most)": {},
    "3 workers, 2 compile threads": {"GRAPHGATE_WORKERS": "3", "GRAPHGATE_COMPILE_THREADS": "2"},
}


def run(env: dict[str, str], small: bool) -> Figures:
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            server = Server(Path(tmp) / "data")
            server.start()
            try:
                return measure_fairness(server, SMALL if small else FULL)
            finally:
                server.stop()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--small", action="store_true", help="the bounded size the tests run")
    args = parser.parse_args()
    load = SMALL if args.small else FULL
    rows = [row(name, run(env, args.small)) for name, env in CONFIGS.items()]
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
    ]
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
