"""The small model's in-process V2 service path, checkout against checkout, interleaved.

Usage: python benchmarks/bench_service_path.py --trees A,B[,C] [--rounds 9] [--requests 1000]
       [--what service|roundtrip] [--profile]

For each checkout (a source tree: this one, /work/wt-base, ...) a child process imports that
tree's code (PYTHONPATH), starts a real worker pool (one worker), compiles fc 16->16 + softmax
and then, on each round's command, times `requests` calls of `server.services.inference.infer`
with a binary body (decode, worker run, encode: what bench_serving.py reports as "V2 service,
binary"), or of `RemoteModel.run` (`--what roundtrip`: the worker round trip alone). The
checkouts take turns round by round; each figure is the median over the rounds of: the wall p50
of a call, the CPU of the calling thread per call (time.thread_time), and the CPU of the
worker's main thread per call (/proc/<pid>/task/<pid>/schedstat; its onnxruntime pool threads
spin between runs and are left out). On a machine shared with other work the CPU figures are
the ones to trust. `--profile`: cProfile of one child's calls instead (Python calls per request
and where the time goes), for the first tree.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _worker_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/task/{pid}/schedstat") as f:
        return int(f.read().split()[0]) / 1e9


def child(tree: str, profile: int) -> None:
    """Serves rounds on stdin ("service 1000"), answering "wall_us thread_cpu_us worker_cpu_us"."""
    sys.path.insert(0, tree)
    import numpy as np

    from executor import SessionOptions
    from server.services import inference
    from server.services.types import LoadedModel
    from validator import DEFAULT_POLICY

    try:  # the layout after the ground-floor work, then the one before it (wt-base)
        from server.cli.user import encode_infer_request
        from server.dispatch import PoolSettings, WorkerPool
        from tests.support.builders import mlp
    except ImportError:
        from server.cli_user import encode_infer_request  # type: ignore[no-redef]
        from server.workers import PoolSettings, WorkerPool  # type: ignore[no-redef]
        from tests.builders import mlp  # type: ignore[no-redef]
    assert inference.__file__.startswith(tree), inference.__file__
    small = mlp((16, 16)).built()
    x = np.random.default_rng(0).standard_normal((1, 16)).astype(np.float32)
    pool = WorkerPool(PoolSettings(workers=1))
    pool.start()
    try:
        remote = pool.compile(
            small.program,
            small.params,
            DEFAULT_POLICY,
            SessionOptions(use_cuda=False),
            lambda: (small.program, small.params),
        )
        model = LoadedModel("t", "small", 1, remote)
        body, headers = encode_infer_request({"x": x})
        calls: dict[str, Callable[[], object]] = {
            "service": lambda: inference.infer(model, body, headers),
            "roundtrip": lambda: remote.run(
                {"x": x}, label=model.label, deadline=time.monotonic() + 30
            ),
        }
        [worker_pid] = pool.pids()
        for run in calls.values():
            for _ in range(300):
                run()
        if profile:
            _profile(calls["service"], profile)
            return
        for line in sys.stdin:
            what, count = line.split()
            print(*_round(calls[what], int(count), worker_pid), flush=True)
    finally:
        pool.stop()


def _round(run: Callable[[], object], count: int, worker_pid: int) -> tuple[float, float, float]:
    walls = []
    cpu, worker = time.thread_time(), _worker_cpu_s(worker_pid)
    for _ in range(count):
        start = time.perf_counter()
        run()
        walls.append(time.perf_counter() - start)
    cpu, worker = time.thread_time() - cpu, _worker_cpu_s(worker_pid) - worker
    return statistics.median(walls) * 1e6, cpu / count * 1e6, worker / count * 1e6


def _profile(run: Callable[[], object], count: int) -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(count):
        run()
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    print(f"Python calls per request: {stats.total_calls / count:.1f}")  # type: ignore[attr-defined]
    stats.sort_stats("cumtime").print_stats(40)
    print(out.getvalue())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trees", default=str(ROOT), help="comma-separated checkouts")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--what", choices=["service", "roundtrip"], default="service")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.requests if args.profile else 0)
        return
    trees = [str(Path(t).resolve()) for t in args.trees.split(",")]
    if args.profile:
        trees = trees[:1]
    children = {
        tree: subprocess.Popen(
            [sys.executable, __file__, "--child", tree, "--requests", str(args.requests)]
            + (["--profile"] if args.profile else []),
            env={**os.environ, "PYTHONPATH": tree},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd="/tmp",  # neither tree's files shadow the other's
        )
        for tree in trees
    }
    if args.profile:
        out, _ = children[trees[0]].communicate()
        print(out)
        return
    rounds: dict[str, list[list[float]]] = {tree: [] for tree in trees}
    for _ in range(args.rounds):
        for tree, proc in children.items():
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(f"{args.what} {args.requests}\n")
            proc.stdin.flush()
            rounds[tree].append([float(v) for v in proc.stdout.readline().split()])
    for proc in children.values():
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait()
    print(f"| checkout | {args.what}: wall p50 | calling thread CPU | worker main thread CPU |")
    print("|---|---|---|---|")
    for tree, figures in rounds.items():
        wall, cpu, worker = (statistics.median(column) for column in zip(*figures, strict=True))
        print(f"| {tree} | {wall:.1f} us | {cpu:.1f} us | {worker:.1f} us |")


if __name__ == "__main__":
    main()
