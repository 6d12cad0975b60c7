"""Server CPU per V2 inference: two graphgate checkouts side by side, rounds interleaved.

The event loop's cost per request caps the server's throughput on 2 cores. On a
shared, noisy machine the figure to trust is the server's CPU time per request (the `graphgate
serve` process and every process under it, its workers, from /proc), not the rate: this starts
one server per checkout (`--base`, e.g. a `git archive` of main, and this one), uploads the
models, then drives both with the same c `tritonclient.http` clients (binary tensors; with
`--protocols http,grpc` also c `tritonclient.grpc` clients, raw contents, on each server's
gRPC port), taking turns round by round, and prints the medians per checkout: the server's
CPU per request, the event loop thread's share of it, the rate, and (batching on) the rows
per worker run the batcher achieved.

    git archive main | tar -x -C /tmp/hot-base   # the baseline checkout, once
    python benchmarks/bench_loop_cost.py --base /tmp/hot-base --requests 3000 --rounds 5 --write

`--write` puts the figures in their section of benchmarks/results/serving.md (bench_serving.py
keeps that section when it rewrites the file).
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_peers  # noqa: E402
from bench_peers import ADMIN_TOKEN, Caller, Clients, Target, raw_session, signature  # noqa: E402
from bench_serving import LOOP_COST_SECTION, RESULTS  # noqa: E402

_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(root_pid: int) -> float:
    """utime + stime of `root_pid` and every live process under it."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        parents[int(entry)] = int(fields[1])
        times[int(entry)] = (int(fields[11]) + int(fields[12])) / _TICK
    total, todo = 0.0, [root_pid]
    while todo:
        pid = todo.pop()
        total += times.get(pid, 0.0)
        todo.extend(child for child, parent in parents.items() if parent == pid)
    return total


def loop_seconds(pid: int) -> float:
    """utime + stime of the main thread of `pid` (the server's event loop)."""
    stat = Path(f"/proc/{pid}/task/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def serve(stack: ExitStack, root: Path, batching: bool) -> tuple[str, str, str, int]:
    """`graphgate serve` from the checkout at `root`; its HTTP and gRPC host:port, a tenant key,
    its pid."""
    port, grpc_port = bench_peers.free_port(), bench_peers.free_port()
    env = {
        "GRAPHGATE_GRPC_PORT": str(grpc_port),
        "GRAPHGATE_ADMIN_TOKEN": ADMIN_TOKEN,
        "GRAPHGATE_TENANT_RATE_PER_S": "0",
        "GRAPHGATE_BATCH_MAX_SIZE": "32" if batching else "0",
        # The clients stay connected while the other servers take their turns.
        "GRAPHGATE_KEEP_ALIVE_TIMEOUT_S": "600",
        "PYTHONPATH": str(root),
    }
    data = Path(stack.enter_context(tempfile.TemporaryDirectory()))
    command = [sys.executable, "-m", "server.cli", "serve", "--port", str(port),
               "--data-dir", str(data)]  # fmt: skip
    url = f"127.0.0.1:{port}"
    stack.enter_context(bench_peers.process(command, f"http://{url}/v2/health/ready", env))
    import httpx2

    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    made = httpx2.post(f"http://{url}/v1/admin/tenants", json={"name": "bench"}, headers=admin)
    made.raise_for_status()
    return url, f"127.0.0.1:{grpc_port}", made.json()["key"], serve_pid(url)


def serve_pid(url: str) -> int:
    """The pid of the `graphgate serve` listening on `url` (host:port)."""
    port = int(url.rpartition(":")[2])
    (pid,) = [int(p) for p in os.listdir("/proc") if p.isdigit() and _is_server(int(p), port)]
    return pid


def _is_server(pid: int, port: int) -> bool:
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"serve" in args and str(port).encode() in args


Cell = tuple[str, bool, str]  # checkout, batching, protocol
Figures = tuple[float, float, float, float]  # server CPU us/request, loop's, req/s, rows/run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="the baseline checkout")
    parser.add_argument("--requests", type=int, default=3000, help="per round and cell")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--models", default="small,image")
    parser.add_argument("--batching", choices=["off", "on", "both"], default="both")
    parser.add_argument("--protocols", default="http", help="http, or http,grpc")
    parser.add_argument("--write", action="store_true", help="into benchmarks/results/serving.md")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    rows: list[tuple[str, bool, str, dict[str, Figures]]] = []
    modes = {"off": [False], "on": [True], "both": [False, True]}[args.batching]
    protocols = args.protocols.split(",")
    roots = {"base": args.base.resolve(), "this": ROOT}
    with ExitStack() as stack:
        servers = {
            (name, batching): serve(stack, root, batching)
            for batching in modes
            for name, root in roots.items()
        }
        for case in bench_peers.cases(args.requests, args.requests, args.models.split(",")):
            clients: dict[Cell, tuple[Clients, int, Target]] = {}
            for (name, batching), (url, grpc_url, key, pid) in servers.items():
                onnx = bench_peers.upload(url, key, case)
                sig, raw = signature(onnx), raw_session(onnx)
                http = Target(name, url, headers={"Authorization": f"Bearer {key}"})
                for protocol in protocols:
                    target = http.over_grpc(grpc_url) if protocol == "grpc" else http
                    make = functools.partial(Caller, target, case, sig, raw)
                    clients[(name, batching, protocol)] = (Clients(make, args.clients), pid, http)
            figures: dict[Cell, list[Figures]] = {k: [] for k in clients}
            for each, _pid, _http in clients.values():
                each.measure(args.clients * 4)  # warm-up: connections, sessions, caches
            for _ in range(args.rounds):
                for cell, (each, pid, http) in clients.items():
                    figures[cell].append(_round(each, pid, http, args.requests, cell[1]))
            for batching in modes:
                for protocol in protocols:
                    medians = {}
                    for name in roots:
                        rounds = figures[(name, batching, protocol)]
                        medians[name] = _medians(rounds)
                        print(_line(case.key, batching, protocol, name, medians[name], rounds))
                    rows.append((case.label, batching, protocol, medians))
            for each, _pid, _http in clients.values():
                each.close()
    if args.write:
        loads = (load_before, os.getloadavg()[0])
        section = report(args, rows, loads)
        text = RESULTS.read_text().partition(LOOP_COST_SECTION)[0].rstrip("\n")
        RESULTS.write_text(f"{text}\n\n{LOOP_COST_SECTION}\n\n{section}")
        print(section)


def _round(each: Clients, pid: int, http: Target, requests: int, batching: bool) -> Figures:
    """One cell's turn: `requests` requests, and what the server spent on them."""
    rows_before = bench_peers.batch_rows(http) if batching else (0.0, 0.0)
    used, loop = cpu_seconds(pid), loop_seconds(pid)
    start = time.perf_counter()
    done = each.measure(requests)
    wall = time.perf_counter() - start
    used, loop = cpu_seconds(pid) - used, loop_seconds(pid) - loop
    rows_after = bench_peers.batch_rows(http) if batching else (0.0, 0.0)
    runs = rows_after[1] - rows_before[1]
    count = done.per_s * wall
    per_run = (rows_after[0] - rows_before[0]) / runs if runs else 0.0
    return 1e6 * used / count, 1e6 * loop / count, done.per_s, per_run


def _medians(rounds: list[Figures]) -> Figures:
    cpu, loop, rate, per_run = (statistics.median(r[i] for r in rounds) for i in range(4))
    return cpu, loop, rate, per_run


def _line(
    model: str, batching: bool, protocol: str, name: str, m: Figures, rounds: list[Figures]
) -> str:
    cpu, loop, rate, per_run = m
    rows = f", {per_run:.1f} rows/run" if batching else ""
    return (
        f"{model:6} batching={'on ' if batching else 'off'} {protocol:4} {name:4}: server CPU "
        f"{cpu:6.0f} us/request (event loop {loop:5.0f}), {rate:7.0f} req/s{rows} "
        f"(rounds: {', '.join(f'{r[0]:.0f}' for r in rounds)})"
    )


def report(
    args: argparse.Namespace,
    rows: list[tuple[str, bool, str, dict[str, Figures]]],
    loads: tuple[float, float],
) -> str:
    command = (
        f"python benchmarks/bench_loop_cost.py --base <baseline checkout> --requests "
        f"{args.requests} --rounds {args.rounds} --clients {args.clients} --protocols "
        f"{args.protocols} --write"
    )
    lines = [
        f"`{command}` on {os.cpu_count()} CPUs, load average (1 min) {loads[0]:.1f} at the "
        f"start, {loads[1]:.1f} at the end. One `graphgate serve` per checkout and batching "
        "setting (`GRAPHGATE_BATCH_MAX_SIZE=0` or 32), all running at once; "
        f"{args.clients} `tritonclient.http` clients (binary tensors, batch 1, the clients "
        "on the same CPUs; `tritonclient.grpc` ones, raw contents, for the grpc rows) drive one "
        "server at a time, the servers taking turns round by round. Server CPU: the server "
        "process and its workers (utime + stime from /proc) per request, median of the rounds; "
        "the event loop's: the server's main thread alone. On a shared machine they are the "
        "figures to trust, the rates move with the other load.",
        "",
        "| model | batching | protocol | server CPU per request, base | this | this / base "
        "| event loop, base | this | req/s, base | this | rows per run, base | this |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, batching, protocol, cells in rows:
        (b_cpu, b_loop, b_rate, b_rows), (cpu, loop, rate, per_run) = cells["base"], cells["this"]
        run_rows = f"{b_rows:.1f} | {per_run:.1f}" if batching else "- | -"
        lines.append(
            f"| {label} | {'on' if batching else 'off'} | {protocol} | {b_cpu:.0f} us "
            f"| {cpu:.0f} us | {cpu / b_cpu:.2f} | {b_loop:.0f} us | {loop:.0f} us "
            f"| {b_rate:.0f} | {rate:.0f} | {run_rows} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
