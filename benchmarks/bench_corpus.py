"""The real-world corpus table: graphgate and Paddle2ONNX 2.1.0 on every tests/corpus model.

Usage: PYTHONPATH=. python benchmarks/bench_corpus.py [--out benchmarks/results/corpus.md]
       [--follow] [--timed 10] [--repeats 3] [NAME...]

For each model (tests/corpus/zoo.py; exports cached under tests/.cache/ecosystem/): its op count;
graphgate's verdict on the legacy program (PASS / REJECTED with codes / FAILED; worst
|diff|/tolerance against Paddle at batch 1 and 2, or the float64 comparison for the models the
test judges that way); the same for Paddle2ONNX, converted in its own venv
(benchmarks/.venv-paddle2onnx, one paddle2onnx_worker.py for the whole corpus) and run here with
onnxruntime on the same feeds; how far the two converters' outputs are from each other; and
graphgate's verdict on the PIR program. Then conversion time (bytes to a ready onnxruntime
session) of graphgate vs Paddle2ONNX for the largest models both convert: runs interleaved
(graphgate first on even rounds, Paddle2ONNX first on odd ones), median of each, ratio.

Both converters run on onnxruntime's CPU kernels, and after its graph optimisations (Conv+BN
fusion, ...) their graphs often compute the same float32 operations in the same order: their
outputs can then be bit-identical, and so are their distances from Paddle. The script checks that
the two ONNX files are different files (stops if not) and prints their direct distance.

--follow: another process is exporting the corpus (tests/corpus/compare.py's cache); wait for
each model's export instead of exporting here.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_executor import Paddle2OnnxWorker, paddle2onnx_python  # noqa: E402
from tests.corpus import compare, zoo  # noqa: E402


class CorpusWorker(Paddle2OnnxWorker):
    """One Paddle2ONNX worker for many models (`run {json}`): its import (~10-40 s) once."""

    def __init__(self, python: Path, scratch: Path) -> None:
        super().__init__(
            python, scratch / "none.pdmodel", scratch / "none.pdiparams", scratch / "none.onnx"
        )

    def convert(self, where: Path, out: Path) -> dict[str, Any]:
        assert self._proc.stdin is not None
        if self._proc.poll() is not None:
            return {"error": f"worker exited with {self._proc.returncode}"}
        paths = {
            "program": str(where / "model.pdmodel"),
            "params": str(where / "model.pdiparams"),
            "out": str(out),
        }
        self._proc.stdin.write("run " + json.dumps(paths) + "\n")
        self._proc.stdin.flush()
        return self._answer()

    def alive(self) -> bool:
        return self._proc.poll() is None


class Converter:
    """Paddle2ONNX conversions; a worker that died (a native abort on one model) is replaced."""

    def __init__(self, scratch: Path) -> None:
        self.python = paddle2onnx_python()
        self.scratch = scratch
        self.worker: CorpusWorker | None = None
        self.versions: dict[str, Any] = {}

    def convert(self, where: Path, out: Path) -> dict[str, Any]:
        if self.worker is None or not self.worker.alive():
            if self.worker is not None:
                self.worker.close()
            self.worker = CorpusWorker(self.python, self.scratch)
            self.versions = self.worker.hello.get("versions", {})
        return self.worker.convert(where, out)

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()


@dataclass
class Row:
    name: str
    package: str
    where: Path | None = None
    ops: int = 0
    ours: compare.Verdict | None = None
    theirs: compare.Verdict | None = None
    pir: str = "not run"
    # max |graphgate - Paddle2ONNX| over every float output at batch 1 and 2
    between: float | None = None
    nodes: tuple[int, int] | None = None
    notes: list[str] = field(default_factory=list)


def export_of(name: str, fmt: str, follow: bool) -> Path | str:
    """The model's export folder (or Paddle's export error)."""
    if not follow:
        return compare.exported([name], fmt)[name]
    while (found := compare.cached(name, fmt)) is None:
        time.sleep(10)
    return found


def correctness(row: Row, converter: Converter, scratch: Path) -> None:
    """graphgate's and Paddle2ONNX's verdicts on the legacy program, and their distance."""
    assert row.where is not None
    files = compare.Files.read(row.where)
    row.ops = compare.op_count(files)
    judged = row.name in compare.FLOAT64_JUDGED
    model = compare.compiled(files)
    ours_run: compare.Runner | None = None
    if isinstance(model, compare.Verdict):
        row.ours = model
    else:
        compiled = model
        ours_run = lambda inputs: list(compiled.run(inputs).values())
        row.ours = compare.outputs_verdict(row.name, ours_run, files, judged)
    out = scratch / f"{row.name}.onnx"
    converted = converter.convert(row.where, out)
    if "error" in converted:
        row.theirs = compare.Verdict("REJECTED", converted["error"][:300], ["P2O"])
        return
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]

    def theirs_run(inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        wanted = {i.name for i in session.get_inputs()}
        return list(session.run(names, {k: v for k, v in inputs.items() if k in wanted}))

    row.theirs = compare.outputs_verdict(row.name, theirs_run, files, judged)
    if ours_run is not None and not isinstance(model, compare.Verdict):
        # The sanity check: two converters, two different files.
        theirs_bytes = out.read_bytes()
        if hashlib.sha256(theirs_bytes).digest() == hashlib.sha256(model.onnx_bytes).digest():
            raise SystemExit(
                f"{row.name}: Paddle2ONNX's ONNX file is graphgate's: the comparison is void"
            )
        row.nodes = (
            len(onnx.load_from_string(model.onnx_bytes).graph.node),
            len(onnx.load_from_string(theirs_bytes).graph.node),
        )
        row.between = distance(row.name, ours_run, theirs_run)
    out.unlink(missing_ok=True)


def distance(name: str, ours: compare.Runner, theirs: compare.Runner) -> float:
    """max |graphgate - Paddle2ONNX| over the float outputs at batch 1 and 2 (same feeds)."""
    worst = 0.0
    for batch, seed in compare.CASES:
        inputs = compare.feeds(zoo.ENTRIES[name], batch, seed)
        for a, b in zip(ours(inputs), theirs(inputs), strict=False):
            if a.shape == b.shape and np.issubdtype(a.dtype, np.floating) and a.size:
                worst = max(worst, float(np.abs(a.astype(np.float64) - b).max()))
    return worst


def pir_verdict(row: Row, follow: bool) -> str:
    """The PIR cell; what is not a PASS gets a note (Paddle's own export error, or graphgate's)."""
    where = export_of(row.name, "pir", follow)
    if isinstance(where, str):
        reason = compare.PIR_NOT_EXPORTABLE.get(row.name)
        last = where.strip().splitlines()[-1][:300] if where.strip() else "no message"
        row.notes.append(f"PIR export by Paddle 3.3.1 fails: {last}")
        return "xfail (Paddle cannot export it)" if reason else "NOT EXPORTED"
    assert row.where is not None
    legacy = compare.Files.read(row.where)
    result = compare.verdict(
        row.name, compare.Files.read(where), row.name in compare.FLOAT64_JUDGED, legacy
    )
    if result.status != "PASS":
        row.notes.append(f"PIR program: {result.line()[:300]}")
    return verdict_cell(result) + (
        f" ({worst_cell(result)})" if result.status != "REJECTED" else ""
    )


def verdict_cell(v: compare.Verdict | None) -> str:
    if v is None:
        return ""
    if v.status == "REJECTED":
        return f"REJECTED {', '.join(dict.fromkeys(v.codes))}"
    return v.status


def worst_cell(v: compare.Verdict | None) -> str:
    if v is None or v.status == "REJECTED":
        return "-"
    if v.float64 is not None:
        return f"vs float64 {v.float64[0]:.2g} (Paddle fp32 {v.float64[1]:.2g})"
    return f"{v.worst:.2g}"


def graphgate_seconds(files: compare.Files) -> float:
    from executor import SessionOptions, compile
    from validator import validate

    started = time.perf_counter()
    compile(validate(files.program, files.params), SessionOptions(use_cuda=False))
    return time.perf_counter() - started


def timings(
    rows: list[Row], count: int, repeats: int, converter: Converter, scratch: Path
) -> list[str]:
    """Bytes to a ready session, interleaved rounds, median each: the largest `count` models
    that both convert (with --timing-only: the largest of those named)."""
    both = [r for r in rows if r.where is not None and "REJECTED" not in (
        verdict_cell(r.ours)[:8], verdict_cell(r.theirs)[:8])]  # fmt: skip
    largest = sorted(both, key=lambda r: r.ops, reverse=True)[:count]
    lines = []
    for row in largest:
        assert row.where is not None
        files = compare.Files.read(row.where)
        ours, theirs = [], []
        for i in range(repeats):
            for side in ("graphgate", "p2o") if i % 2 == 0 else ("p2o", "graphgate"):
                if side == "graphgate":
                    ours.append(graphgate_seconds(files))
                else:
                    result = converter.convert(row.where, scratch / "timed.onnx")
                    if "error" not in result:
                        theirs.append(result["total_s"])
        if not theirs:
            continue
        g, p = statistics.median(ours), statistics.median(theirs)
        lines.append(f"| {row.name} | {row.ops} | {g:.3f} | {p:.3f} | {p / g:.1f}x |")
        print(lines[-1], flush=True)
    return lines


def write(
    out: Path, rows: list[Row], count: int, timed: list[str], context: dict[str, str]
) -> None:
    """The tables so far (rewritten after every model: a long run leaves what it measured)."""
    table = []
    for r in rows:
        between = "-" if r.between is None else f"{r.between:.2g}"
        nodes = "-" if r.nodes is None else f"{r.nodes[0]} / {r.nodes[1]}"
        table.append(
            f"| {r.name} | {r.package} | {r.ops} | {verdict_cell(r.ours)} | {worst_cell(r.ours)} | "
            f"{verdict_cell(r.theirs)} | {worst_cell(r.theirs)} | {between} | {nodes} | {r.pir} |"
        )
    why = [
        f"- {r.name} ({label}): {v.line()[:300]}"
        for r in rows
        for label, v in (("graphgate", r.ours), ("Paddle2ONNX", r.theirs))
        if v is not None and v.status in ("REJECTED", "FAILED")
    ] + [f"- {r.name}: {note}" for r in rows for note in r.notes]
    lines = [
        "# Real-world corpus: graphgate vs Paddle2ONNX 2.1.0",
        "",
        f"Command: `{context['command']}` ({len(rows)} of {count} models; {context['when']}). "
        f"Versions: {context['versions']}.",
        "",
        'Verdict against Paddle 3.3.1\'s Executor on the legacy program at batch 1 and 2. "worst": '
        "max |diff| / (1e-5 + 1e-4 |paddle|) (PASS at most 1), or, for the models "
        "tests/corpus/test_corpus.py judges against a float64 run of the same program, the max "
        "|diff| of each side from it (PASS: at most 2x Paddle's own float32 distance). "
        '"gg - p2o": max |graphgate - Paddle2ONNX| on the same feeds; "nodes": ONNX node counts '
        "(graphgate / Paddle2ONNX). Both run on onnxruntime's CPU kernels, so where their graphs "
        "reduce to the same fused kernels their outputs are bit-identical (gg - p2o = 0) and the "
        "worst columns agree: that is measured, not copied (the script stops if the two ONNX "
        "files are the same file). PIR: graphgate on the PIR program (`model.json`) against the "
        "same Paddle answers.",
        "",
        "| model | package | ops | graphgate | worst | Paddle2ONNX | worst | gg - p2o | nodes | PIR |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *table,
        "",
        "## Why (rejections, wrong answers, PIR export failures)",
        "",
        *(why or ["- none"]),
        "",
        f"## Conversion time, largest models (bytes to a ready onnxruntime session, "
        f"{context['repeats']} interleaved rounds, median)",
        "",
        f"Machine: {context['machine']}. The ratio is Paddle2ONNX / graphgate in the same rounds.",
        "",
        "| model | ops | graphgate s | Paddle2ONNX s | ratio |",
        "|---|---|---|---|---|",
        *(timed or ["| (not measured yet) | | | | |"]),
    ]
    out.write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("names", nargs="*")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "corpus.md"))
    parser.add_argument("--follow", action="store_true", help="wait for another process's exports")
    parser.add_argument(
        "--timed", type=int, default=10, help="how many of the largest models to time"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--timing-only",
        action="store_true",
        help="only the conversion-time table, for the named models (no verdicts)",
    )
    args = parser.parse_args()
    names = args.names or list(zoo.ENTRIES)
    if not args.follow:
        compare.exported(names, "legacy")
        compare.exported(names, "pir")
    out = Path(args.out)
    load = os.getloadavg()
    context = {
        "command": "PYTHONPATH=. python benchmarks/bench_corpus.py"
        + (" " + " ".join(args.names) if args.names else ""),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "versions": "",
        "repeats": str(args.repeats),
        "machine": f"{os.cpu_count()} CPUs, load average {load[0]:.1f} at the start",
    }
    rows = [Row(n, zoo.ENTRIES[n].package) for n in names]
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        converter = Converter(scratch)
        timed: list[str] = []
        try:
            for row in rows if args.timing_only else []:
                where = export_of(row.name, "legacy", args.follow)
                if not isinstance(where, str):
                    row.where = where
                    row.ops = compare.op_count(compare.Files.read(where))
            for row in [] if args.timing_only else rows:
                where = export_of(row.name, "legacy", args.follow)
                if isinstance(where, str):
                    row.notes.append(
                        f"Paddle export failed: {where.strip().splitlines()[-1][:200]}"
                    )
                    row.pir = "-"
                    continue
                row.where = where
                correctness(row, converter, scratch)
                context["versions"] = ", ".join(f"{k} {v}" for k, v in converter.versions.items())
                print(
                    f"{row.name}: {row.ours and row.ours.line()} | p2o {row.theirs and row.theirs.line()} "
                    f"| between {row.between}",
                    flush=True,
                )
                write(out, [r for r in rows if r.ours], len(names), timed, context)
            for row in [] if args.timing_only else rows:
                if row.where is not None:
                    row.pir = pir_verdict(row, args.follow)
                    print(f"{row.name}: pir {row.pir}", flush=True)
                    write(out, [r for r in rows if r.ours], len(names), timed, context)
            timed = timings(rows, args.timed, args.repeats, converter, scratch)
            end = os.getloadavg()[0]
            context["machine"] += (
                f", {end:.1f} at the end (2 cores shared with other engineers' work)"
            )
        finally:
            converter.close()
        write(out, [r for r in rows if r.ours], len(names), timed, context)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
