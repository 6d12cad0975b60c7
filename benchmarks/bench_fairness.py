"""Fairness under one tenant's flood: writes benchmarks/results/fairness.md.

Against a real `graphgate serve` on loopback: tenant B's inference and model-list latency with
the server otherwise idle (the baseline, same run), then while tenant A runs concurrent checks of
a large program and concurrent inference clients (tests/support/fairness.py has the load; the
bound is this benchmark's, tests/server/test_fairness.py checks progress and order). Each
configuration in CONFIGS is a fresh server. Then, on a fresh server, B's inferences idle and
while another client sends 16 MiB heads back to back (each refused 431 at the head cap; the
refusal itself is tests/server/test_http_abuse.py's).
Usage: PYTHONPATH=. .venv/bin/python benchmarks/bench_fairness.py [--small] [--head-abuse]
(`--head-abuse`: only that last measurement, printed; the results file is left as it is.)
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import socket
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


BIG_HEAD_BYTES = 16 << 20


def _send_big_heads(port: int, stop: Any, refused: Any, other: Any) -> None:
    """Another client (a process of its own): 16 MiB heads back to back, each on a new
    connection, until `stop`; counts the answers that are 431 and those that are not."""
    head = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * BIG_HEAD_BYTES
    while not stop.is_set():
        answer = b""
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.settimeout(30)
            with contextlib.suppress(OSError):  # refused mid-send: the answer is waiting
                s.sendall(head + b"\r\n\r\n")
            with contextlib.suppress(OSError):
                answer = s.recv(64)
        counter = refused if answer.startswith(b"HTTP/1.1 431") else other
        with counter.get_lock():
            counter.value += 1


def measure_head_abuse(
    server: Server, load: Load
) -> tuple[dict[str, float], dict[str, float], dict[int, int], tuple[int, int]]:
    """B's inference p50/p99 idle, then while another client sends 16 MiB heads back to back;
    B's statuses meanwhile and the heads answered (431, anything else)."""
    key = post_tenant(server, "tenant-b")
    assert post_model(server, key, affine().built()).status_code == 201
    measure_tenant(server.url, key, 50)  # warm: model loaded in the workers, connection open
    idle, _, _ = measure_tenant(server.url, key, load.samples)
    ctx = multiprocessing.get_context("spawn")
    stop, refused, other = ctx.Event(), ctx.Value("i", 0), ctx.Value("i", 0)
    sender = ctx.Process(target=_send_big_heads, args=(server.port, stop, refused, other))
    sender.start()
    try:
        while refused.value + other.value == 0:  # the first head answered: the abuse is on
            assert sender.is_alive(), f"the sender failed: exit {sender.exitcode}"
            time.sleep(0.01)
        abused, _, statuses = measure_tenant(server.url, key, load.samples)
    finally:
        stop.set()
        sender.join(60)
    return percentiles(idle), percentiles(abused), dict(statuses), (refused.value, other.value)


def head_abuse_line(load: Load) -> str:
    idle, abused, statuses, (refused, other) = _fresh_server(
        {}, lambda server: measure_head_abuse(server, load)
    )
    return (
        f"B infer while another client sends {BIG_HEAD_BYTES >> 20} MiB heads back to back "
        f"(defaults, a fresh server; {refused} heads answered 431, {other} otherwise; B "
        f"{sorted(statuses.items())}): idle p50 / p99 {idle['p50']:.1f} / {idle['p99']:.1f} ms, "
        f"during {abused['p50']:.1f} / {abused['p99']:.1f} ms "
        f"(p99 {abused['p99'] / idle['p99']:.1f}x)"
    )


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
    parser.add_argument(
        "--head-abuse", action="store_true", help="only B against 16 MiB heads, printed"
    )
    args = parser.parse_args()
    load = SMALL if args.small else FULL
    if args.head_abuse:
        print(head_abuse_line(load))
        return
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
        f"{RATIO_BOUND:g} x idle p99 + {SLACK_MS:g} ms (checked here; tests/server/"
        "test_fairness.py checks progress and order: B served, ahead of A's checks).",
        "",
        "| server | B infer idle p50 / p99 ms | B infer loaded p50 / p99 ms | p99 ratio | "
        "within bound | B infer p99 in the app, idle / loaded ms (at most: histogram edge) | "
        "B list p99 idle / loaded ms | B statuses | A statuses (A's answers a second) |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"The CPUs' share alone (defaults, a fresh server, no tenant A): {floor}.",
        "",
        f"{head_abuse_line(load)}.",
    ]
    RESULTS.write_text("\n".join(lines) + "\n" + _notes())
    print("\n".join(lines))


if __name__ == "__main__":
    main()
