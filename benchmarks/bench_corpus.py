"""The real-world corpus table: graphgate and Paddle2ONNX 2.1.0 on every tests/corpus model.

Usage: PYTHONPATH=. python benchmarks/bench_corpus.py [--out benchmarks/results/corpus.md] [NAME...]

For each model (tests/corpus/zoo.py; exports cached under tests/.cache/ecosystem/): its op count,
graphgate's verdict on the legacy and on the PIR program (PASS / REJECTED with codes / FAILED,
worst |diff|/tolerance against Paddle at batch 1 and 2, or the float64 comparison for the models
the test judges that way), and the same for Paddle2ONNX run in its own venv
(benchmarks/.venv-paddle2onnx, driven by paddle2onnx_worker.py as in bench_executor.py; its ONNX
is run here with onnxruntime on the same feeds). Then conversion time (bytes to a ready session)
of graphgate vs Paddle2ONNX for the ten largest models that both convert, each a median of 3.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import onnxruntime as ort

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_executor import Paddle2OnnxWorker, paddle2onnx_python  # noqa: E402
from tests.corpus import compare, zoo  # noqa: E402
from tests.corpus.test_corpus import FLOAT64_JUDGED  # noqa: E402

REPEATS = 3


def graphgate_seconds(files: compare.Files) -> float:
    from executor import SessionOptions, compile
    from validator import validate

    times = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        compile(validate(files.program, files.params), SessionOptions(use_cuda=False))
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def paddle2onnx(python: Path, name: str, where: Path) -> tuple[compare.Verdict, float | None]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "model.onnx"
        worker = Paddle2OnnxWorker(python, where / "model.pdmodel", where / "model.pdiparams", out)
        try:
            runs = [worker.run() for _ in range(REPEATS)]
        finally:
            worker.close()
        if "error" in runs[0]:
            return compare.Verdict("REJECTED", runs[0]["error"][:200], ["P2O"]), None
        session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        reference = compare.Files.read(where)
        result = compare.outputs_verdict(
            name,
            lambda inputs: session.run(names, inputs),
            reference,
            name in FLOAT64_JUDGED,
        )
        return result, statistics.median(r["total_s"] for r in runs)


def cell(v: compare.Verdict) -> str:
    if v.status == "REJECTED":
        return f"REJECTED {', '.join(dict.fromkeys(v.codes))}"
    if v.status.startswith("NOT "):
        return v.status
    if v.float64 is not None:
        return f"{v.status} (vs float64 {v.float64[0]:.2g}, paddle {v.float64[1]:.2g})"
    return f"{v.status} ({v.worst:.2g})"


def write(
    out: Path, count: int, rows: list[str], reasons: list[str],
    timings: list[tuple[int, str, float, float]],
) -> None:  # fmt: skip
    """The table so far (rewritten after every model: a long run leaves what it measured)."""
    timings = sorted(timings, reverse=True)
    lines = [
        "# Real-world corpus: graphgate vs Paddle2ONNX 2.1.0",
        "",
        f"Command: `PYTHONPATH=. python benchmarks/bench_corpus.py` ({len(rows)} of {count} models). "
        "Verdict against Paddle 3.3.1's Executor at batch 1 and 2: worst |diff| / (1e-5 + 1e-4 |paddle|) "
        "in brackets, or for the models tests/corpus/test_corpus.py judges against a float64 run, "
        "the worst |diff| of each side from it (graphgate's must be at most 2x Paddle's float32).",
        "",
        "| model | package | ops | graphgate (legacy) | graphgate (PIR) | Paddle2ONNX 2.1.0 |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
        "## Why",
        "",
        *reasons,
        "",
        "## Conversion time, ten largest (bytes to a ready onnxruntime session, median of 3)",
        "",
        "| model | ops | graphgate s | Paddle2ONNX s | ratio |",
        "|---|---|---|---|---|",
        *[
            f"| {name} | {ops} | {g:.3f} | {p:.3f} | {p / g:.1f}x |"
            for ops, name, g, p in timings[:10]
        ],
    ]
    out.write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("names", nargs="*")
    parser.add_argument(
        "--pir-if-cached",
        action="store_true",
        help="check only the PIR programs already exported (NOT RUN for the others)",
    )
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "corpus.md"))
    args = parser.parse_args()
    names = args.names or list(zoo.ENTRIES)
    legacy = compare.exported(names, "legacy")
    pir: dict[str, Path | str | None]
    if args.pir_if_cached:
        pir = {name: compare.cached(name, "pir") for name in names}
    else:
        pir = {**compare.exported(names, "pir")}
    python = paddle2onnx_python()
    rows, timings, reasons = [], [], []
    for name in names:
        entry = zoo.ENTRIES[name]
        where = legacy[name]
        if isinstance(where, str):
            rows.append(f"| {name} | {entry.package} | - | NOT EXPORTED | | |")
            reasons.append(f"- {name}: Paddle export failed: {where.splitlines()[-1][:200]}")
            continue
        files = compare.Files.read(where)
        ours = compare.verdict(name, files, name in FLOAT64_JUDGED)
        pir_where = pir[name]
        ours_pir = (
            compare.verdict(name, compare.Files.read(pir_where), name in FLOAT64_JUDGED, files)
            if isinstance(pir_where, Path)
            else compare.Verdict("NOT EXPORTED" if pir_where else "NOT RUN")
        )
        theirs, their_s = paddle2onnx(python, name, where)
        print(f"{name}: {ours.line()} | pir {ours_pir.line()} | p2o {theirs.line()}", flush=True)
        rows.append(
            f"| {name} | {entry.package} | {ours.ops} | {cell(ours)} | {cell(ours_pir)} | {cell(theirs)} |"
        )
        for label, v in (("graphgate", ours), ("graphgate PIR", ours_pir), ("Paddle2ONNX", theirs)):
            if v.status in ("REJECTED", "FAILED"):
                reasons.append(f"- {name} ({label}): {v.line()[:300]}")
        if ours.status == "PASS" and their_s is not None:
            timings.append((ours.ops, name, graphgate_seconds(files), their_s))
        write(Path(args.out), len(names), rows, reasons, timings)
    write(Path(args.out), len(names), rows, reasons, timings)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
