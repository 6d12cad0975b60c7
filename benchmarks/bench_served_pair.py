"""Served small-model requests, checkouts' servers side by side, rounds interleaved.

Usage: python benchmarks/bench_served_pair.py --trees A,B [--rounds 7] [--requests 1000] [--json]
                                              [--clients N]

Starts one `graphgate serve` per checkout (bench_serving.serve, its defaults: 2 workers, the
batcher), uploads fc 16->16 + softmax to each, then the checkouts take turns round by round:
`requests` requests, batch 1, one http.client connection, V2 binary (or JSON with `--json`).
Prints, per checkout, the median over the rounds of the server's CPU per request (the serve
process and every process under it, utime + stime from /proc: the figure to trust on a shared
machine), split into the serve process's own and its workers', and of the client's p50.
With `--clients N` (N > 1), N threads, each with its own connection, share a round's requests:
the batcher forms batches, and the table adds the p99, requests/s and the rows per batched run
(the server's `graphgate_batch_size`, over the timed rounds). Requests/s at many clients is
bounded by the 2 CPUs that the clients share with the servers; CPU per request is the figure
that tells two checkouts apart.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_peers  # noqa: E402
import bench_serving as bs  # noqa: E402
import httpx2  # noqa: E402
import numpy as np  # noqa: E402

from tests.support.builders import mlp  # noqa: E402

_TICK = os.sysconf("SC_CLK_TCK")
Runner = Callable[[], object]


def tree_cpu_s(root: int) -> tuple[float, float]:
    """utime + stime of `root` itself, and of every process under it (its workers)."""
    procs: dict[int, tuple[int, int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            procs[int(name)] = (int(fields[1]), int(fields[11]) + int(fields[12]))
    tree, grown = {root}, True
    while grown:
        grown = False
        for pid, (parent, _ticks) in procs.items():
            if parent in tree and pid not in tree:
                tree.add(pid)
                grown = True
    own = procs[root][1] if root in procs else 0
    under = sum(procs[pid][1] for pid in tree - {root} if pid in procs)
    return own / _TICK, under / _TICK


def _serve_pid(port: str) -> int:
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    words = f.read().split(b"\0")
            except OSError:
                continue
            if b"serve" in words and port.encode() in words:
                return int(name)
    raise SystemExit(f"no serve process on port {port}")


def timed_round(runs: list[Runner], requests: int) -> list[float]:
    """Each runner (one per client, on its own thread) makes its share of `requests`; the
    wall time of every request."""

    def client(run: Runner, count: int) -> list[float]:
        walls = []
        for _ in range(count):
            start = time.perf_counter()
            run()
            walls.append(time.perf_counter() - start)
        return walls

    shares = [requests // len(runs) + (i < requests % len(runs)) for i in range(len(runs))]
    if len(runs) == 1:
        return client(runs[0], shares[0])
    with ThreadPoolExecutor(len(runs)) as pool:
        return [w for walls in pool.map(client, runs, shares) for w in walls]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trees", required=True, help="comma-separated checkouts")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--clients", type=int, default=1, help="concurrent clients")
    args = parser.parse_args()
    small = mlp((16, 16)).built()
    x = np.random.default_rng(0).standard_normal((1, 16)).astype(np.float32)
    case = bs.Case("small", "small", small.program, small.params, "x", x, args.requests)
    runner = bs.json_runner if args.json else bs.binary_runner
    with ExitStack() as stack:
        cells: dict[
            str, tuple[list[Runner], bench_peers.Target, int, list[tuple[float, ...]], list[float]]
        ] = {}
        for tree in args.trees.split(","):
            data = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            url = stack.enter_context(bs.serve(data, Path(tree)))
            auth = {"Authorization": f"Bearer {bs.tenant_key(url)}"}
            client = stack.enter_context(httpx2.Client(base_url=url, headers=auth))
            bs.upload_and_download(client, case)
            runs = [runner(bs.Connection(url, auth), case)[0] for _ in range(args.clients)]
            timed_round(runs, 300 * args.clients)
            server = bench_peers.Target(tree, url.removeprefix("http://"))
            cells[tree] = (runs, server, _serve_pid(url.rsplit(":", 1)[1]), [], [0.0, 0.0])
        for _ in range(args.rounds):
            for runs, server, pid, figures, batched in cells.values():
                before, rows_before = tree_cpu_s(pid), bench_peers.batch_rows(server)
                start = time.perf_counter()
                walls = timed_round(runs, args.requests)
                elapsed = time.perf_counter() - start
                own, under = (b - a for a, b in zip(before, tree_cpu_s(pid), strict=True))
                for i, (a, b) in enumerate(
                    zip(rows_before, bench_peers.batch_rows(server), strict=True)
                ):
                    batched[i] += b - a
                per = 1e6 / args.requests
                p50, p99 = (float(np.percentile(walls, q)) * 1e3 for q in (50, 99))
                figures.append(
                    ((own + under) * per, own * per, under * per, p50, p99, len(walls) / elapsed)
                )
    kind = "JSON" if args.json else "binary"
    print(f"{args.clients} client(s), {args.rounds} rounds of {args.requests} requests")
    print(
        f"| checkout | server CPU per request ({kind}) | serve process | its workers | p50 "
        "| p99 | req/s | rows per batched run |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for tree, (_runs, _server, _pid, figures, (rows, batches)) in cells.items():
        total, own, under, p50_ms, p99_ms, rate = (
            statistics.median(c) for c in zip(*figures, strict=True)
        )
        per_run = f"{rows / batches:.1f}" if batches else "-"
        print(
            f"| {tree} | {total:.0f} us | {own:.0f} us | {under:.0f} us | {p50_ms:.3f} ms "
            f"| {p99_ms:.2f} ms | {rate:.0f} | {per_run} |"
        )


if __name__ == "__main__":
    main()
