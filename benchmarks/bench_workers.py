"""Worker IPC cost, ResNet50 throughput and crash recovery: writes benchmarks/results/workers.md.

In one run, against a baseline in the same run: the in-process CompiledModel.run of a 1x16
model vs the same model through the worker pool (pipe + shared-memory arena); ResNet50 (224,
batch 1) requests per second at 1, 2 and 4 concurrent callers, in-process (one session shared
by the callers, as before workers) vs through 2 workers of each thread setting; the time from a
worker's SIGKILL to the next successful answer. ResNet50 is saved once with real Paddle into benchmarks/.cache/
(bench_executor.py's export).
Usage: PYTHONPATH=. .venv/bin/python benchmarks/bench_workers.py [--runs N] [--resnet-runs N]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

import numpy as np

from executor import SessionOptions, compile
from server.dispatch import PoolSettings, WorkerPool
from server.errors import WorkerCrashed
from tests.support.builders import affine
from validator import Policy, validate

RESULTS = Path(__file__).parent / "results" / "workers.md"
Runner = Callable[[dict[str, np.ndarray]], object]


def p50_ms(call: Callable[[], object], runs: int) -> float:
    for _ in range(min(200, runs)):
        call()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def block_seconds(run: Runner, feeds: dict[str, np.ndarray], callers: int, runs: int) -> float:
    """Seconds for `callers` threads to send `runs` requests each, back to back."""
    barrier = threading.Barrier(callers + 1)

    def caller() -> None:
        barrier.wait()
        for _ in range(runs):
            run(feeds)

    threads = [threading.Thread(target=caller) for _ in range(callers)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    return time.perf_counter() - start


BLOCKS: Final = 12
CALLERS: Final = (1, 2, 4)
# (label, session options of the workers): the server's default, then the other settings
WORKER_SETTINGS: Final = (
    (
        "default: 2 threads, spinning 20 us at most",
        SessionOptions(use_cuda=False, allow_spinning=True, spin_us=20),
    ),
    (
        "2 threads not spinning (GRAPHGATE_ORT_ALLOW_SPINNING=false)",
        SessionOptions(use_cuda=False, allow_spinning=False),
    ),
    (
        "1 thread (GRAPHGATE_ORT_INTRA_OP_THREADS=1)",
        SessionOptions(use_cuda=False, intra_op_threads=1, allow_spinning=True, spin_us=20),
    ),
)


def resnet_lines(runs: int) -> list[str]:
    """ResNet50 requests per second, in-process vs 2 workers of each setting, at 1-4 callers."""
    from benchmarks.bench_executor import MODELS, model_files

    (model,) = [m for m in MODELS if m.key == "resnet50"]
    program_path, params_path = model_files([model])[model.key]
    program, params = program_path.read_bytes(), params_path.read_bytes()
    local = compile(validate(program, params), SessionOptions(use_cuda=False))
    (name,) = [spec.name for spec in local.program.inputs]
    feeds = {name: np.random.default_rng(0).random((1, 3, 224, 224), np.float32)}
    targets: dict[str, Runner] = {"in-process": local.run}
    pools = []
    for label, options in WORKER_SETTINGS:
        pools.append(pool := WorkerPool(PoolSettings(workers=2)))
        targets[label] = pool.compile(
            program, params, Policy(), options, lambda: (program, params)
        ).run
    for run in targets.values():
        run(feeds)  # the workers load the model; every session warms up
        run(feeds)
    rates = {callers: _interleaved_rates(targets, feeds, callers, runs) for callers in CALLERS}
    for pool in pools:
        pool.stop()
    rows = []
    for label in targets:
        cells = [
            f"{rates[c][label]:.2f} ({rates[c][label] / rates[c]['in-process']:.0%})"
            for c in CALLERS
        ]
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    return [
        "",
        f"ResNet50 224x224, batch 1: requests/s of {BLOCKS} blocks of {runs} requests per caller "
        "for each target, the targets taken in turn (forward, then backward) with 30 ms of quiet "
        "before each block, so the machine's drift lands on all alike; in brackets, the ratio to "
        "in-process (goal >= 95%). In-process: one session with onnxruntime's defaults (one "
        "thread per core, spinning) shared by the callers, as before workers; workers: 2 "
        "processes of each setting.",
        "",
        "| target | " + " | ".join(f"{c} caller{'s' * (c > 1)}" for c in CALLERS) + " |",
        "|---|" + "---|" * len(CALLERS),
        *rows,
    ]


def _interleaved_rates(
    targets: dict[str, Runner], feeds: dict[str, np.ndarray], callers: int, runs: int
) -> dict[str, float]:
    seconds = dict.fromkeys(targets, 0.0)
    for block in range(BLOCKS):
        for label in list(targets)[:: 1 if block % 2 == 0 else -1]:
            time.sleep(0.03)  # a spinning session's threads go quiet before the next target
            seconds[label] += block_seconds(targets[label], feeds, callers, runs)
    return {label: BLOCKS * runs * callers / s for label, s in seconds.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3000)
    parser.add_argument("--resnet-runs", type=int, default=8, help="per caller and block")
    args = parser.parse_args()
    options = SessionOptions(use_cuda=False, intra_op_threads=1)
    built = affine(16).built()
    local = compile(validate(built.program, built.params), options)
    pool = WorkerPool(PoolSettings(workers=1))
    remote = pool.compile(
        built.program, built.params, Policy(), options, lambda: (built.program, built.params)
    )
    feeds = {"x": np.ones((1, 16), np.float32)}
    deadline = time.monotonic() + 3600
    in_process = p50_ms(lambda: local.run(feeds), args.runs)
    through = p50_ms(lambda: remote.run(feeds, deadline=deadline), args.runs)
    recoveries = []
    for _ in range(5):
        (pid,) = pool.pids()
        start = time.perf_counter()
        os.kill(pid, signal.SIGKILL)
        while True:
            try:
                remote.run(feeds)
                break
            except WorkerCrashed:
                continue
        recoveries.append(time.perf_counter() - start)
    pool.stop()
    lines = [
        "# Worker IPC cost and crash recovery (benchmarks/bench_workers.py)",
        "",
        f"{os.cpu_count()} CPUs, {args.runs} runs each; p50 of one request, 1x16 affine model.",
        "",
        "| path | p50 ms |",
        "|---|---|",
        f"| in-process CompiledModel.run | {in_process:.3f} |",
        f"| through the worker pool (pipe + shared memory, lazy load warm) | {through:.3f} |",
        f"| added by the worker | {through - in_process:.3f} (goal <= 0.25) |",
        "",
        f"Crash to recovered (SIGKILL to the next answer, worst of 5): "
        f"{max(recoveries) * 1e3:.0f} ms (median {statistics.median(recoveries) * 1e3:.0f} ms; "
        "goal < 2 s). The replacement worker loads the model again on its first request.",
        *resnet_lines(args.resnet_runs),
    ]
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
