"""Lean graphs: graphgate's ONNX before and after constant folding (executor/fold.py).

Usage: python benchmarks/bench_lean_graphs.py --before-source DIR [--runs N] [--compiles N]
       [--corpus a,b] [--models a,b]

DIR is another source tree of graphgate, the one to compare with (e.g. the commit before:
`git archive COMMIT | tar -x -C DIR`). For each model, real Paddle's own export: the
conformance models of benchmarks/bench_executor.py (saved into benchmarks/.cache/) and corpus
models (tests/corpus, exported into tests/.cache/ecosystem/; their packages come from the
package registry once):
  - ONNX nodes: graphgate's serving model from each tree, and after onnxruntime's optimizations
    (what a session runs);
  - bytes to a ready session: validate, prepare (lower, fold, gate, shape cross-check) and the
    onnxruntime CPU session, in a child process per tree whose runs alternate; medians;
  - latency, batch 1 and 8: both trees' ONNX in this process on onnxruntime (CPU, the same
    settings: 2 intra-op threads, every graph optimization), runs in alternating blocks; p50;
    and the max |difference| between the two trees' outputs on the same feeds; a second
    session of the 'now' model in the same rotation gives the noise floor (A/A).
Writes benchmarks/results/lean_graphs.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FINDINGS = "## Findings"
RESULTS = ROOT / "benchmarks" / "results" / "lean_graphs.md"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402

CORPUS = "levit_128s,swin_tiny,deit_tiny,mobilevit_xxs,pvt_v2_b0"
CONFORMANCE = "resnet50,mobilenet_v3_large_224,transformer_d256_l4"
BATCHES = (1, 8)
THREADS = 2
AA = "now, second session"

# The child: one tree's compile of one model, timed; run with PYTHONPATH=<tree>.
CHILD = """
import json, sys, time
from executor import SessionOptions
from executor.session import build, prepare
from validator import validate
program, params, out, repeats = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
program, params = open(program, "rb").read(), open(params, "rb").read()
options = SessionOptions(use_cuda=False)
times = []
for _ in range(repeats + 1):  # the first is a warm-up
    start = time.perf_counter()
    prepared = prepare(validate(program, params))
    build(prepared, options)
    times.append(time.perf_counter() - start)
open(out, "wb").write(prepared.model_bytes)
print(json.dumps(times[1:]))
"""


@dataclass
class Model:
    name: str
    program: Path
    params: Path
    feeds: dict[int, dict[str, np.ndarray]]  # batch -> feeds ("": the one input's, unnamed)


def conformance_models(keys: list[str]) -> list[Model]:
    import bench_executor

    chosen = [m for m in bench_executor.MODELS if m.key in keys]
    files = bench_executor.model_files(chosen)
    models = []
    for m in chosen:
        program, params = files[m.key]
        rng = np.random.default_rng(0)
        by_batch: dict[int, dict[str, np.ndarray]] = {}
        for batch in BATCHES:
            if m.feed == "image":
                by_batch[batch] = {"": rng.standard_normal((batch, 3, 224, 224), np.float32)}
            else:
                ids = rng.integers(0, m.vocab, (batch, bench_executor.SEQ_LEN))
                by_batch[batch] = {"": ids}
        models.append(Model(m.key, program, params, by_batch))
    return models


def corpus_models(names: list[str]) -> list[Model]:
    from tests.corpus import compare, zoo

    models = []
    for name, where in compare.exported(names).items():
        if isinstance(where, str):
            print(f"{name}: not exported: {where[:200]}", flush=True)
            continue
        entry = zoo.ENTRIES[name]
        feeds = {batch: compare.feeds(entry, batch, seed=batch) for batch in BATCHES}
        models.append(Model(name, where / "model.pdmodel", where / "model.pdiparams", feeds))
    return models


def compile_in(source: Path, model: Model, out: Path, repeats: int) -> list[float]:
    env = {**os.environ, "PYTHONPATH": str(source)}
    command = [sys.executable, "-c", CHILD, str(model.program), str(model.params), str(out)]
    done = subprocess.run(
        [*command, str(repeats)], env=env, cwd=source, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"{model.name} in {source}: {done.stderr[-2000:]}")
    times: list[float] = json.loads(done.stdout.strip().splitlines()[-1])
    return times


def session(path: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def optimized_nodes(path: Path) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        options = ort.SessionOptions()
        options.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
        options.log_severity_level = 3
        ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        return len(onnx.load(options.optimized_model_filepath).graph.node)


def latencies(
    sessions: dict[str, ort.InferenceSession], feeds: dict[str, np.ndarray], runs: int
) -> tuple[dict[str, float], float]:
    """p50 ms of each session on `feeds`, blocks alternating; and the outputs' max |diff|."""
    outputs = {name: s.run(None, feeds) for name, s in sessions.items()}
    first, second = outputs["before"], outputs["now"]
    diff = max(
        float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max()) if a.size else 0.0
        for a, b in zip(first, second, strict=True)
    )
    times: dict[str, list[float]] = {name: [] for name in sessions}
    block = max(3, runs // 5)
    while len(times[next(iter(times))]) < runs:
        for name, s in sessions.items():
            s.run(None, feeds)  # untimed: the first after switching
            for _ in range(block):
                start = time.perf_counter()
                s.run(None, feeds)
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}, diff


def measure(model: Model, before: Path, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    files = {tree: tmp / f"{model.name}.{tree}.onnx" for tree in ("before", "now")}
    compile_s: dict[str, list[float]] = {"before": [], "now": []}
    for round_ in range(args.compiles):  # the trees take turns, each starting every other round
        order = [("before", before), ("now", ROOT)]
        for tree, source in order if round_ % 2 == 0 else order[::-1]:
            compile_s[tree] += compile_in(source, model, files[tree], 1)
    row: dict[str, Any] = {"model": model.name}
    for tree, path in files.items():
        graph = onnx.load(str(path)).graph
        row[f"nodes {tree}"] = len(graph.node)
        row[f"top ops {tree}"] = Counter(n.op_type for n in graph.node).most_common(4)
        row[f"ort nodes {tree}"] = optimized_nodes(path)
        row[f"compile s {tree}"] = statistics.median(compile_s[tree])
    sessions = {tree: session(path) for tree, path in files.items()}
    sessions[AA] = session(files["now"])  # the noise floor: the same model, another session
    for batch in BATCHES:
        feeds = model.feeds[batch]
        if "" in feeds:
            feeds = {sessions["now"].get_inputs()[0].name: feeds[""]}
        p50s, diff = latencies(sessions, feeds, args.runs)
        for tree, ms in p50s.items():
            row[f"p50 b{batch} {tree}"] = ms
        row[f"diff b{batch}"] = diff
    print(json.dumps(row), flush=True)
    return row


def report(args: argparse.Namespace, rows: list[dict[str, Any]], load: float) -> str:
    lines = [
        "# Lean graphs: graphgate's ONNX before and after constant folding",
        "",
        f"Command: `python benchmarks/bench_lean_graphs.py --before-source DIR --runs {args.runs} "
        f"--compiles {args.compiles} --corpus {args.corpus} --models {args.models}` "
        f"(DIR: {args.before_label or args.before_source}). {os.cpu_count()} CPUs, load average "
        f"{load:.1f} before and {os.getloadavg()[0]:.1f} after (other work shares the machine: "
        "read the ratios, which are taken within one run).",
        "",
        "Nodes: graphgate's serving model, and what onnxruntime runs after its optimizations. "
        "Bytes to ready: validate, lower (with folding), gate, shape cross-check and an "
        f"onnxruntime CPU session, median of {args.compiles}. Latency: onnxruntime CPU, "
        f"{THREADS} intra-op threads, p50 of {args.runs} runs per batch size, the two models' "
        "runs alternating in blocks; |diff|: the largest difference between their outputs.",
        "",
        "| model | nodes before | nodes now | onnxruntime runs (before / now) | bytes to ready "
        "before | now | p50 b1 before | now | A/A | p50 b8 before | now | A/A | max abs diff |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        diff = max(r["diff b1"], r["diff b8"])
        lines.append(
            f"| {r['model']} | {r['nodes before']:,} | {r['nodes now']:,} | "
            f"{r['ort nodes before']:,} / {r['ort nodes now']:,} | "
            f"{r['compile s before']:.2f} s | {r['compile s now']:.2f} s | "
            f"{r['p50 b1 before']:.2f} ms | {r['p50 b1 now']:.2f} ms | "
            f"{r[f'p50 b1 {AA}']:.2f} ms | "
            f"{r['p50 b8 before']:.2f} ms | {r['p50 b8 now']:.2f} ms | "
            f"{r[f'p50 b8 {AA}']:.2f} ms | {diff:.1e} |"
        )
    lines += [
        "",
        "A/A: a second session of the 'now' model, timed in the same rotation: how far two "
        "sessions of one graph differ here, the noise any before/now difference must exceed.",
    ]
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before-source", type=Path, required=True)
    parser.add_argument("--before-label", default="")
    parser.add_argument("--runs", type=int, default=30, help="timed runs per batch size")
    parser.add_argument("--compiles", type=int, default=3, help="timed compiles per tree")
    parser.add_argument("--corpus", default=CORPUS, help="tests/corpus models")
    parser.add_argument("--models", default=CONFORMANCE, help="bench_executor.py models")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    models = conformance_models([k for k in args.models.split(",") if k])
    models += corpus_models([n for n in args.corpus.split(",") if n])
    with tempfile.TemporaryDirectory() as tmp:
        rows = [measure(m, args.before_source, args, Path(tmp)) for m in models]
    text = report(args, rows, load)
    # The findings below the tables are written by hand: a new run keeps them.
    kept = RESULTS.read_text().partition(FINDINGS)[2] if RESULTS.exists() else ""
    RESULTS.write_text(text + (f"\n{FINDINGS}{kept}" if kept else ""))
    print(text)


if __name__ == "__main__":
    main()
