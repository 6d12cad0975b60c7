"""Console page render time with 100 tenants and 1,000 model versions in the database.

Usage: python benchmarks/bench_console.py [--runs N]

Seeds a fresh data directory (benchmarks/seed_console.py), starts the app in this process
(its lifespan: migrations, services), logs in through the console's form, then GETs the
overview, tenants and models pages N times each in turns, timing each request end to end
through the ASGI app (no sockets). Baseline in the same run: GET /v2/health/live through the
same client, the cost of a request that renders nothing. Goal: p50 under 50 ms a page.
Writes benchmarks/results/console.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from fastapi.testclient import TestClient  # noqa: E402
from seed_console import ADMIN_TOKEN, seed  # noqa: E402

from server.main import create_app  # noqa: E402

PAGES = {
    "health (baseline)": "/v2/health/live",
    "overview": "/admin/",
    "tenants": "/admin/tenants",
    "models (page 1 of all)": "/admin/models",
    "models (one tenant)": "/admin/models?tenant=tenant-042",
}
GOAL_MS = 50.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=60)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        settings = seed(Path(folder) / "data")
        seeded_s = time.perf_counter() - started
        with TestClient(create_app(settings)) as client:
            _login(client)
            times = _measure(client, args.runs)
    lines = _report(times, args.runs, seeded_s)
    print("\n".join(lines))
    out = ROOT / "benchmarks" / "results" / "console.md"
    out.write_text("\n".join(lines) + "\n")


def _login(client: TestClient) -> None:
    form = client.get("/admin/login").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', form)
    assert csrf is not None
    answer = client.post("/admin/login", data={"key": ADMIN_TOKEN, "csrf": csrf.group(1)})
    assert answer.status_code == 200 and "Overview" in answer.text, answer.status_code


def _measure(client: TestClient, runs: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in PAGES}
    for path in PAGES.values():  # warm-up: caches, template compilation
        assert client.get(path).status_code == 200, path
    for _ in range(runs):
        for name, path in PAGES.items():
            started = time.perf_counter()
            answer = client.get(path)
            times[name].append(1000 * (time.perf_counter() - started))
            assert answer.status_code == 200, path
    return times


def _report(times: dict[str, list[float]], runs: int, seeded_s: float) -> list[str]:
    base = statistics.median(times["health (baseline)"])
    lines = [
        "# Console render time",
        "",
        f"`python benchmarks/bench_console.py --runs {runs}`: 100 tenants, 1,000 model versions "
        f"(seeded in {seeded_s:.1f} s), {runs} runs a page in turns, in-process ASGI client.",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}.",
        "",
        "| page | p50 ms | p99 ms | p50 / baseline | goal p50 < 50 ms |",
        "|---|---:|---:|---:|---|",
    ]
    for name, values in times.items():
        ordered = sorted(values)
        p50 = statistics.median(ordered)
        p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
        goal = "" if name.startswith("health") else ("met" if p50 < GOAL_MS else "MISSED")
        lines.append(f"| {name} | {p50:.2f} | {p99:.2f} | {p50 / base:.1f}x | {goal} |")
    return lines


if __name__ == "__main__":
    main()
