"""GPU check: on a machine with CUDA, in under 5 minutes,
1. the CUDA execution provider is chosen (and its device reported),
2. every conformance model gives the same outputs on CUDA and on CPU (within tolerance),
3. ResNet50 (224x224) latency and throughput at batch 1, 8 and 32, with the batcher (one run
   of N rows, what server/dispatch/batching.py dispatches) and without (N runs of one row).
Without CUDA it says so and exits 0: tests and CI never need a GPU.

    PYTHONPATH=. .venv/bin/python benchmarks/gpu_check.py [--models lenet,resnet18] [--runs 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial

import numpy as np

from executor import CompiledModel, SessionOptions, compile, session_device
from executor.device import CUDA
from tests.conformance import models
from tests.conformance.paddle_util import Saved, random_feeds
from validator import Policy, validate

CONFORMANCE: dict[str, Callable[[], Saved]] = {
    "lenet": models.lenet,
    "alexnet": models.alexnet,
    "vgg11": models.vgg11,
    "resnet18": models.resnet18,
    "resnet50": models.resnet50,
    "mobilenet_v1": models.mobilenet_v1,
    "mobilenet_v2": models.mobilenet_v2,
    "mobilenet_v3_small": models.mobilenet_v3_small,
    "mobilenet_v3_large": models.mobilenet_v3_large,
    "squeezenet1_0": models.squeezenet1_0,
    "squeezenet1_1": models.squeezenet1_1,
    "shufflenet_v2_x0_25": models.shufflenet_v2_x0_25,
    "shufflenet_v2_swish": models.shufflenet_v2_swish,
    "densenet121": models.densenet121,
    "googlenet": models.googlenet,
    "transformer_relu": models.transformer_relu,
    "transformer_gelu": models.transformer_gelu,
}
# TF32 and cuDNN's algorithm choices differ from MLAS in the last bits.
RTOL, ATOL = 1e-3, 1e-3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(CONFORMANCE))
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    reason = session_device(True).why_not_cuda
    if reason is not None:
        print(f"CUDA absent: {reason}. Nothing to check on this machine.")
        return 0
    failures = compare_all(args.models.split(","))
    resnet50_figures(args.runs)
    return 1 if failures else 0


def compare_all(names: list[str]) -> int:
    failures = 0
    for name in names:
        saved = CONFORMANCE[name]()
        validated = validate(saved.program, saved.params, Policy())
        on_cuda = compile(validated, SessionOptions(use_cuda=True))
        on_cpu = compile(validated, SessionOptions(use_cuda=False))
        if on_cuda.provider != CUDA:
            print(f"FAIL {name}: CUDA provider not chosen (got {on_cuda.provider})")
            failures += 1
            continue
        feeds = random_feeds(validated, batch=2)
        got, want = on_cuda.run(feeds), on_cpu.run(feeds)
        worst = max(_excess(got[k], want[k]) for k in want)
        ok = worst <= 1.0
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {on_cuda.device}, worst |diff|/tol {worst:.3f}")
    return failures


def _excess(got: np.ndarray, want: np.ndarray) -> float:
    if got.dtype.kind in "iub":
        return 0.0 if np.array_equal(got, want) else float("inf")
    tol = ATOL + RTOL * np.abs(want.astype(np.float64))
    return float(np.max(np.abs(got.astype(np.float64) - want) / tol, initial=0.0))


def resnet50_figures(runs: int) -> None:
    saved = models.resnet50(224)
    compiled = compile(validate(saved.program, saved.params, Policy()), SessionOptions())
    rng = np.random.default_rng(0)
    print(f"\nResNet50 224x224 on {compiled.device}: p50 latency, images/s")
    print("batch | batched: p50 ms, img/s | unbatched (N runs of 1): p50 ms, img/s")
    for batch in (1, 8, 32):
        image = rng.standard_normal((batch, 3, 224, 224), dtype=np.float32)
        rows = [image[i : i + 1] for i in range(batch)]
        together = _times(partial(compiled.run, {"image": image}), runs)
        alone = _times(partial(_one_by_one, compiled, rows), runs)
        print(
            f"{batch:5d} | {together * 1e3:8.2f}, {batch / together:8.0f} | "
            f"{alone * 1e3:8.2f}, {batch / alone:8.0f}"
        )


def _one_by_one(compiled: CompiledModel, rows: list[np.ndarray]) -> None:
    for row in rows:
        compiled.run({"image": row})


def _times(work: Callable[[], object], runs: int) -> float:
    work()  # warm-up: cuDNN algorithm search, arena growth
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        work()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


if __name__ == "__main__":
    sys.exit(main())
