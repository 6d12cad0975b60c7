"""Validator speed and memory: ResNet50 (program + params) and synthetic chains of 2,000 / 20,000 ops.

Usage: python benchmarks/bench_validate.py [--repeat N]
Needs paddlepaddle (a test dependency) only to export ResNet50 once into benchmarks/.cache/;
the measurements themselves run without Paddle. Writes benchmarks/results/validate.md.

`--corpus BASE_TREE [--rounds R]`: validation time per corpus program (every export cached under
tests/.cache/ecosystem/exports/ for the corpus' current build, both formats), this checkout
against another checkout of the project (the "before"), each in its own child process
importing its own tree, in interleaved rounds (the machine is shared: medians); writes the
corpus section of validate.md.
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
from typing import Any

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


# A child process of one tree: validates each program `repeat` times, prints per program its
# outcome and median seconds, and the validator module it imported (to prove which tree ran).
_CORPUS_CHILD = r"""
import json, statistics, sys, time
import validator
from validator import ValidationFailed, validate
paths, repeat = json.loads(sys.argv[1]), int(sys.argv[2])
out = {}
for key, (program, params) in paths.items():
    data = open(program, "rb").read()
    weights = open(params, "rb").read() if params else None
    def once():
        try:
            validate(data, weights)
            return "accepted"
        except ValidationFailed as failed:
            return "refused " + ",".join(sorted({str(c) for c in failed.codes}))
    status = once()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        once()
        times.append(time.perf_counter() - start)
    out[key] = [status, statistics.median(times)]
print(json.dumps({"module": validator.__file__, "programs": out}))
"""
CORPUS_MARK = "<!-- the corpus section: bench_validate.py --corpus -->"


def corpus_programs() -> dict[str, tuple[str, str | None]]:
    """ "name (format)" -> (program file, params file) of every cached corpus export."""
    from tests.corpus import compare  # imports Paddle (the export cache key has its version)

    found: dict[str, tuple[str, str | None]] = {}
    for folder in sorted(p for p in compare.folder().iterdir() if p.is_dir()):
        for fmt in ("legacy", "pir"):
            if compare.cached(folder.name, fmt) is None:
                continue  # not exported yet (or being exported)
            files = [folder / fmt / "model.pdmodel", folder / fmt / "model.json"]
            program = next((f for f in files if f.exists()), None)
            params = folder / fmt / "model.pdiparams"
            if program is not None:
                found[f"{folder.name} ({fmt})"] = (
                    str(program),
                    str(params) if params.exists() else None,
                )
    return found


def validate_in(tree: Path, programs: dict[str, tuple[str, str | None]], repeat: int) -> Any:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, "-c", _CORPUS_CHILD, json.dumps(programs), str(repeat)]
    done = subprocess.run(command, cwd=tree, env=env, check=True, capture_output=True, text=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["module"].startswith(str(tree)), f"{tree}: imported {result['module']}"
    return result["programs"]


def corpus(base: Path, rounds: int, repeat: int) -> int:
    programs = corpus_programs()
    trees = {"before": base.resolve(), "after": ROOT}
    times: dict[str, dict[str, list[float]]] = {k: {p: [] for p in programs} for k in trees}
    status: dict[str, dict[str, str]] = {k: {} for k in trees}
    for round_ in range(rounds):
        order = list(trees) if round_ % 2 == 0 else list(reversed(trees))
        for which in order:
            for key, (outcome, seconds) in validate_in(trees[which], programs, repeat).items():
                times[which][key].append(seconds)
                status[which][key] = outcome
    rows, ratios = [], []
    for key in programs:
        before = statistics.median(times["before"][key])
        after = statistics.median(times["after"][key])
        ratio = after / before
        compared = status["before"][key] == status["after"][key] == "accepted"
        if compared:
            ratios.append((ratio, key))
        outcome = status["after"][key]
        if status["before"][key] != outcome:
            outcome = f"{status['before'][key]} -> {outcome}"
        rows.append(f"| {key} | {before * 1e3:.1f} | {after * 1e3:.1f} | {ratio:.2f} | {outcome} |")
    worst = max(ratios) if ratios else (0.0, "none")
    section = (
        f"{CORPUS_MARK}\n## Validation time per corpus program, before and after\n\n"
        f"`python benchmarks/bench_validate.py --corpus "
        f"{base} --rounds {rounds} --repeat {repeat}`: {len(programs)} programs (the corpus "
        f"exports cached for its current build), before = {base}, after = this checkout; "
        f"each a child process importing its own tree, {rounds} interleaved rounds of "
        f"{repeat} validations per program; the medians over the rounds of each round's "
        f"median. The machine is shared (2 CPUs, other engineers' work running): figures "
        f"below ~5 ms move by 10-20% between runs.\n\n"
        f"Worst ratio among programs both accept: {worst[0]:.2f} ({worst[1]}); goal <= 1.2.\n\n"
        "| program | before ms | after ms | after/before | outcome |\n|---|---|---|---|---|\n"
        + "\n".join(rows)
        + "\n"
    )
    text = RESULTS.read_text() if RESULTS.exists() else ""
    kept = text.split(CORPUS_MARK)[0].rstrip("\n")
    RESULTS.write_text(kept + "\n\n" + section)
    print(section)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--corpus", type=Path, help="the checkout to compare with (before)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.corpus is not None:
        return corpus(args.corpus, args.rounds, args.repeat)
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
    # The corpus section (--corpus) stays.
    corpus_section = ""
    if RESULTS.exists() and CORPUS_MARK in RESULTS.read_text():
        corpus_section = "\n" + CORPUS_MARK + RESULTS.read_text().split(CORPUS_MARK)[1]
    RESULTS.write_text(header + table + "\n" + corpus_section)
    print(header + table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
