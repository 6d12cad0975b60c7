"""Soak: writes benchmarks/results/soak.md.

Against a real `graphgate serve` on loopback: 10,000 requests (V2 inferences of two models, a
model lookup every fiftieth) at 64 concurrency across two tenants; statuses, and the resident
memory of the server and its workers after warm-up (the baseline, same run) and at the end
(tests/support/soak.py has the load, tests/server/test_soak.py the bounds).
Usage: PYTHONPATH=. .venv/bin/python benchmarks/bench_soak.py [--requests N] [--concurrency C]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from tests.support.served import Server
from tests.support.soak import MAX_GROWTH, SOAK_ENV, WARM_UP_SHARE, Soak, run_soak

RESULTS = Path(__file__).parent / "results" / "soak.md"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(Path(tmp) / "data", SOAK_ENV)
        server.start()
        try:
            f = run_soak(server, Soak(args.requests, args.concurrency))
        finally:
            server.stop()
    errors = sum(n for status, n in f.statuses.items() if status >= 500)
    mib = 1024 * 1024
    lines = [
        "# Soak (benchmarks/bench_soak.py)",
        "",
        f"{os.cpu_count()} CPUs, client threads on the same machine. {args.requests} requests at "
        f"{args.concurrency} concurrency across 2 tenants (1x4/8x4 affine, 1x8/8x8 MLP, a "
        f"`GET /v1/models/{{name}}` every 50th); memory baseline after the first "
        f"{WARM_UP_SHARE:.0%} of the requests.",
        "",
        "| figure | value |",
        "|---|---|",
        f"| statuses | {dict(sorted(f.statuses.items()))} |",
        f"| 5xx | {errors} (goal 0) |",
        f"| requests per second | {args.requests / f.seconds:.0f} |",
        f"| RSS server + workers after warm-up | {f.rss_warm_bytes / mib:.1f} MiB |",
        f"| RSS server + workers at the end | {f.rss_end_bytes / mib:.1f} MiB |",
        f"| RSS growth after warm-up | {f.growth:+.2%} (goal < {MAX_GROWTH:.0%}) |",
        f"| processes (server first) | {len(f.pids_end)}; replaced during the run: "
        f"{'no' if f.pids_end == f.pids_warm else 'yes'} |",
        "",
        "The tenants' rate limit is lifted for the soak (tests/server/test_soak.py SOAK_ENV: at"
        " the default 200/s about half of the run was answered 429 RATE_LIMITED); each tenant's"
        " 32 clients fit its concurrency cap of 32, so every answer should be 200.",
    ]
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
