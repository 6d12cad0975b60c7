"""Validator speed and memory: ResNet50 (program + params) and synthetic chains of 2,000 / 20,000 ops.

Usage: python benchmarks/bench_validate.py [--repeat N]
Needs paddlepaddle (a test dependency) only to export ResNet50 once into benchmarks/.cache/;
the measurements themselves run without Paddle. Writes benchmarks/results/validate.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "benchmarks" / ".cache"
RESULTS = ROOT / "benchmarks" / "results" / "validate.md"
sys.path.insert(0, str(ROOT))

from graph_proto.builder import ProgramBuilder  # noqa: E402
from graph_proto.types import DType  # noqa: E402
from validator import DEFAULT_POLICY, validate  # noqa: E402


def resnet50_files() -> tuple[Path, Path]:
    """Exports ResNet50 at 224x224 with real Paddle once (in a child process) and caches it."""
    program, params = CACHE / "resnet50.pdmodel", CACHE / "resnet50.pdiparams"
    if not program.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        script = (
            "from tests.conformance.models import resnet50\n"
            "s = resnet50(224)\n"
            f"open({str(program)!r}, 'wb').write(s.program)\n"
            f"open({str(params)!r}, 'wb').write(s.params)\n"
        )
        subprocess.run([sys.executable, "-c", script], check=True, cwd=ROOT)
    return program, params


def synthetic_chain(ops: int) -> bytes:
    """feed -> (relu, scale) repeated -> fetch: `ops` ops in all, every var fully declared."""
    b = ProgramBuilder()
    previous = b.feed("x", DType.FP32, [-1, 64])
    for i in range(ops - 2):
        name = b.var(f"t{i}", DType.FP32, [-1, 64])
        if i % 2:
            b.op("relu", {"X": [previous]}, {"Out": [name]})
        else:
            b.op("scale", {"X": [previous]}, {"Out": [name]}, {"scale": 0.5, "bias": 0.0,
                                                             "bias_after_scale": True})  # fmt: skip
        previous = name
    b.fetch(previous)
    return b.program_bytes()


def median_seconds(fn: object, repeat: int) -> float:
    assert callable(fn)
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def peak_rss_validating(program: Path, params: Path) -> dict[str, float]:
    """Peak RSS of a fresh process that reads both files and validates them (no Paddle loaded)."""
    # ru_maxrss survives fork+exec (it would report the parent's peak), so the child resets its
    # high-water mark through /proc/self/clear_refs and reads VmHWM (Linux).
    script = (
        "import json, sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "def status(key):\n"
        "    for line in open('/proc/self/status'):\n"
        "        if line.startswith(key):\n"
        "            return int(line.split()[1]) / 1024\n"
        "open('/proc/self/clear_refs', 'w').write('5')\n"
        "from validator import validate\n"
        "base = status('VmRSS:')\n"
        f"v = validate(open({str(program)!r}, 'rb').read(), open({str(params)!r}, 'rb').read())\n"
        "print(json.dumps({'base_mb': base, 'peak_mb': status('VmHWM:')}))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    program, params = resnet50_files()
    program_bytes, params_bytes = program.read_bytes(), params.read_bytes()
    resnet = median_seconds(lambda: validate(program_bytes, params_bytes), args.repeat)
    policy = replace(DEFAULT_POLICY, max_ops=50_000)
    small, large = synthetic_chain(2_000), synthetic_chain(20_000)
    t_small = median_seconds(lambda: validate(small, None, policy), args.repeat)
    t_large = median_seconds(lambda: validate(large, None, policy), max(3, args.repeat // 3))
    memory = peak_rss_validating(program, params)
    params_mb = len(params_bytes) / 2**20
    rows = [
        ("ResNet50 224x224 (program + params)", f"{resnet * 1e3:.1f} ms", "goal < 100 ms"),
        ("synthetic 2,000 ops", f"{t_small * 1e3:.1f} ms", ""),
        ("synthetic 20,000 ops", f"{t_large * 1e3:.1f} ms", ""),
        ("20,000 / 2,000 time ratio", f"{t_large / t_small:.2f}", "must be <= 12 (linear = 10)"),
        ("ResNet50 params file", f"{params_mb:.1f} MiB", ""),
        (
            "peak RSS validating ResNet50",
            f"{memory['peak_mb']:.1f} MiB",
            f"limit 2 x params + 150 = {2 * params_mb + 150:.1f} MiB",
        ),
        ("RSS after imports, before reading", f"{memory['base_mb']:.1f} MiB", ""),
    ]
    table = "| figure | value | note |\n|---|---|---|\n" + "\n".join(
        f"| {a} | {b} | {c} |" for a, b, c in rows
    )
    header = (
        f"# Validator benchmark\n\n`python benchmarks/bench_validate.py --repeat {args.repeat}` "
        f"on {os.cpu_count()} CPUs, Python {sys.version.split()[0]}.\n\n"
    )
    RESULTS.write_text(header + table + "\n")
    print(header + table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
