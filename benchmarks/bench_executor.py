"""Executor against Paddle2ONNX 2.1.0: time from bytes to a ready session, and inference latency.

Usage: python benchmarks/bench_executor.py [--repeat N] [--runs N] [--threads 1,2] [--models a,b]

For ResNet50 (224), MobileNetV3-Large (224) and an Embedding + TransformerEncoder (benchmark size,
and the tests' tiny size), saved once with real Paddle (a test dependency) into benchmarks/.cache/:
  1. bytes to a ready session: graphgate reads both files, validates, and compile()s (lower, gate,
     shape cross-check, onnxruntime CPU session); Paddle2ONNX 2.1.0 converts the same files as its
     command line does and onnxruntime opens its output, in a worker process whose runs alternate
     with graphgate's. Medians of N runs after one warm-up; Paddle2ONNX's import time excluded.
  2. inference latency, batch 1: both ONNX models in this process on the same onnxruntime (CPU),
     same thread settings (1 and all CPUs by default), runs in alternating blocks; median and p90,
     an A/A control (two graphgate sessions of one model) for the noise floor, and the max abs
     difference of the outputs.
Paddle2ONNX is never a graphgate dependency: this script installs it into its own virtual
environment, benchmarks/.venv-paddle2onnx (gitignored), and runs it there, in a subprocess
(benchmarks/paddle2onnx_worker.py). Also prints where graphgate's time goes and compares the two
ONNX graphs (op counts before and after onnxruntime's optimizations). Writes
benchmarks/results/executor.md.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "benchmarks" / ".cache"
VENV = ROOT / "benchmarks" / ".venv-paddle2onnx"
WORKER = ROOT / "benchmarks" / "paddle2onnx_worker.py"
RESULTS = ROOT / "benchmarks" / "results" / "executor.md"
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402

import executor.session as session_module  # noqa: E402
from executor import SessionOptions, compile  # noqa: E402
from executor import gate as gate_module  # noqa: E402
from executor.lower import ONNX_OPSET  # noqa: E402
from validator import validate  # noqa: E402

SEQ_LEN = 128
_ERROR_LINE = re.compile(r"error|fail|expected|not supported|abort|exception", re.IGNORECASE)
TRANSFORMER = "d_model=256, nhead=4, dim_feedforward=1024, num_layers=4, vocab=10000"


@dataclass(frozen=True)
class Model:
    key: str  # file name in benchmarks/.cache/
    label: str
    build: str  # Python expression on tests.conformance.models, run in a child process
    feed: str  # "image" (float32 [1, 3, 224, 224]) or "ids" (int64 [1, SEQ_LEN])
    vocab: int = 0


MODELS = [
    # resnet50.* is also bench_validate.py's cached export
    Model("resnet50", "ResNet50 224x224", "models.resnet50(224)", "image"),
    Model(
        "mobilenet_v3_large_224",
        "MobileNetV3-Large 224x224",
        "models.vision('mobilenet_v3_large', 224)",
        "image",
    ),
    Model(
        "transformer_d256_l4",
        f"Embedding + TransformerEncoder ({TRANSFORMER}), seq {SEQ_LEN}",
        f"models.transformer('relu', {TRANSFORMER})",
        "ids",
        10000,
    ),
    Model(
        "transformer_tiny",
        f"Embedding + TransformerEncoder, tests' size (d_model 16, 2 layers), seq {SEQ_LEN}",
        "models.transformer_relu()",
        "ids",
        100,
    ),
]

# Paddle2ONNX 2.1.0 imports paddle but does not declare it; its default Polygraphy constant folding
# pip-installs onnx_graphsurgeon and sympy on first use unless they are there. onnxruntime is pinned
# to the version graphgate runs, so that session creation compares like with like.
P2O_REQUIREMENTS = [
    "paddle2onnx==2.1.0",
    "paddlepaddle==3.3.1",
    f"onnxruntime=={ort.__version__.split('+')[0]}",
    "onnx_graphsurgeon",
    "sympy",
]


def model_files(models: list[Model]) -> dict[str, tuple[Path, Path]]:
    """Saves each model with real Paddle once (in one child process) and caches the two files."""
    files = {m.key: (CACHE / f"{m.key}.pdmodel", CACHE / f"{m.key}.pdiparams") for m in models}
    missing = [m for m in models if not files[m.key][0].exists()]
    if missing:
        CACHE.mkdir(parents=True, exist_ok=True)
        lines = ["from tests.conformance import models"]
        for m in missing:
            program, params = files[m.key]
            lines += [
                f"s = {m.build}",
                f"open({str(params)!r}, 'wb').write(s.params)",
                f"open({str(program)!r}, 'wb').write(s.program)",  # last: marks it complete
            ]
        subprocess.run([sys.executable, "-c", "\n".join(lines)], check=True, cwd=ROOT)
    return files


def paddle2onnx_python() -> Path:
    """benchmarks/.venv-paddle2onnx with P2O_REQUIREMENTS, created or updated when needed."""
    return venv_python(VENV, P2O_REQUIREMENTS)


def venv_python(home: Path, requirements: Sequence[str]) -> Path:
    """The Python of the venv at `home` with `requirements`, created or updated when the list
    differs from the one it was last made with."""
    python = home / "bin" / "python"
    marker = home / "graphgate-requirements.txt"
    wanted = "\n".join(requirements) + "\n"
    if python.exists() and marker.exists() and marker.read_text() == wanted:
        return python
    print(f"creating {home.relative_to(ROOT)} with {' '.join(requirements)}", flush=True)
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(home)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", *requirements], check=True)
    marker.write_text(wanted)
    return python


class Paddle2OnnxWorker:
    """benchmarks/paddle2onnx_worker.py in the Paddle2ONNX venv: one conversion per run()."""

    def __init__(self, python: Path, program: Path, params: Path, out: Path) -> None:
        self._tmp = tempfile.TemporaryDirectory()
        self._stderr = Path(self._tmp.name) / "stderr.log"
        self._log = Path(self._tmp.name) / "paddle2onnx.log"
        # Paddle2ONNX 2.x translates .pdmodel files to PIR: Paddle's default, set in case the
        # environment turned it off.
        env = {**os.environ, "GLOG_minloglevel": "2", "FLAGS_enable_pir_api": "1"}
        with self._stderr.open("wb") as stderr:
            self._proc = subprocess.Popen(
                [str(python), str(WORKER), str(program), str(params), str(out),
                 "--opset", str(ONNX_OPSET), "--log", str(self._log)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True,
                env=env, cwd=self._tmp.name,
            )  # fmt: skip
        self.hello = self._answer()

    def _answer(self) -> dict[str, Any]:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            if line.startswith("@@P2O "):
                found: dict[str, Any] = json.loads(line[len("@@P2O ") :])
                return found
        code = self._proc.wait()
        output = "".join(
            path.read_text(errors="replace") for path in (self._stderr, self._log) if path.exists()
        )
        tail = [
            ln.strip() for ln in re.sub(r"\x1b\[[0-9;]*m", "", output).splitlines() if ln.strip()
        ]
        errors = [ln for ln in tail if _ERROR_LINE.search(ln) and "[WARNING]" not in ln]
        return {"error": f"worker died (exit {code}): {' | '.join((errors or tail)[-3:])[:500]}"}

    def run(self) -> dict[str, Any]:
        assert self._proc.stdin is not None
        if self._proc.poll() is not None:
            return {"error": f"worker exited with {self._proc.returncode}"}
        self._proc.stdin.write("run\n")
        self._proc.stdin.flush()
        return self._answer()

    def close(self) -> None:
        end_worker(self._proc)
        self._tmp.cleanup()


def end_worker(proc: subprocess.Popen[str]) -> None:
    """Closes a worker's stdin (its end of the conversation) and waits for it; killed after 60 s."""
    if proc.stdin is not None:
        proc.stdin.close()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# -- graphgate: bytes to session, with a breakdown of compile() --------------------------------


@dataclass
class Stages:
    times: dict[str, list[float]] = field(default_factory=dict)

    def add(self, name: str, seconds: float) -> None:
        self.times.setdefault(name, []).append(seconds)

    def median(self, name: str) -> float:
        return statistics.median(self.times[name]) if name in self.times else float("nan")


@contextmanager
def timed_stages(stages: Stages) -> Iterator[None]:
    """Wraps what compile() calls (lower, gate.check, gate.cross_check_shapes, the session) with
    timers; a stage whose function is not there (the executor changed) is simply not reported."""
    targets = [
        (session_module, "lower", "lower"),
        (gate_module, "check", "gate check (onnx.checker full)"),
        (gate_module, "cross_check_shapes", "shape cross-check (ONNX inference)"),
        (session_module, "_session", "onnxruntime session"),
    ]
    saved = []
    for module, attr, name in targets:
        original = getattr(module, attr, None)
        if original is None:
            continue

        def wrapper(*a: Any, _f: Callable[..., Any] = original, _n: str = name, **k: Any) -> Any:
            start = time.perf_counter()
            try:
                return _f(*a, **k)
            finally:
                stages.add(_n, time.perf_counter() - start)

        saved.append((module, attr, original))
        setattr(module, attr, wrapper)
    try:
        yield
    finally:
        for module, attr, original in saved:
            setattr(module, attr, original)


def graphgate_once(program: Path, params: Path, stages: Stages, options: SessionOptions) -> Any:
    """Bytes to a ready session: read both files, validate, compile."""
    t0 = time.perf_counter()
    program_bytes, params_bytes = program.read_bytes(), params.read_bytes()
    t1 = time.perf_counter()
    validated = validate(program_bytes, params_bytes)
    t2 = time.perf_counter()
    compiled = compile(validated, options)
    t3 = time.perf_counter()
    stages.add("read files", t1 - t0)
    stages.add("validate", t2 - t1)
    stages.add("compile", t3 - t2)
    stages.add("total", t3 - t0)
    return compiled


def bytes_to_session(
    python: Path, m: Model, program: Path, params: Path, repeat: int
) -> tuple[Stages, float, Any, dict[str, Any]]:
    """One warm-up each, then `repeat` runs of each side, interleaved (alternating which goes
    first) so that machine noise hits both alike. Returns graphgate's stage times, its warm-up
    run, its last CompiledModel, and Paddle2ONNX's figures (or its error)."""
    options = SessionOptions(use_cuda=False)  # CPU, as Paddle2ONNX's session: like with like
    out = CACHE / f"{m.key}.paddle2onnx.onnx"
    worker = Paddle2OnnxWorker(python, program, params, out)
    p2o = dict(worker.hello)
    warm, stages = Stages(), Stages()
    with timed_stages(warm):
        compiled = graphgate_once(program, params, warm, options)
    runs: list[dict[str, Any]] = []
    if "error" not in p2o:
        first = worker.run()
        if "error" in first:
            p2o["error"] = first["error"]
        else:
            p2o["first_s"] = first["total_s"]
    try:
        for i in range(repeat):
            for side in (
                ("graphgate", "paddle2onnx") if i % 2 == 0 else ("paddle2onnx", "graphgate")
            ):
                if side == "graphgate":
                    compiled = None  # as the worker, which keeps no session between runs
                    gc.collect()
                    with timed_stages(stages):
                        compiled = graphgate_once(program, params, stages, options)
                elif "error" not in p2o:
                    result = worker.run()
                    if "error" in result:
                        p2o["error"] = result["error"]
                    else:
                        runs.append(result)
    finally:
        worker.close()
    if "error" not in p2o:
        for key in ("total_s", "convert_s", "session_s"):
            p2o[key] = statistics.median(r[key] for r in runs)
        p2o["onnx"] = str(out)
    return stages, warm.median("total"), compiled, p2o


# -- inference ---------------------------------------------------------------------------------


def feeds_for(m: Model, name: str) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    if m.feed == "image":
        return {name: rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}
    return {name: rng.integers(0, m.vocab, (1, SEQ_LEN)).astype(np.int64)}


def session_options(threads: int, optimized_path: str | None = None) -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    if optimized_path:
        options.optimized_model_filepath = optimized_path
    return options


def latency(
    runners: dict[str, Callable[[], object]], runs: int, warmup: int, block: int = 10
) -> dict[str, list[float]]:
    """Times the callables in blocks of `block` runs, taking turns (rotating who goes first), so
    that machine noise hits all alike. Not run by run: after a run, onnxruntime's intra-op
    threads keep spinning for a while and would slow down the next session's run (not the same
    session's), which is not what a model serving back-to-back requests sees; each block starts
    with 2 untimed runs for that reason."""
    for run in runners.values():
        for _ in range(warmup):
            run()
    times: dict[str, list[float]] = {name: [] for name in runners}
    names = list(runners)
    for b in range(-(-runs // block)):
        for name in names[b % len(names) :] + names[: b % len(names)]:
            run = runners[name]
            for _ in range(2):
                run()
            for _ in range(min(block, runs - b * block)):
                start = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - start)
    return times


def op_counts(model: onnx.ModelProto) -> Counter[str]:
    """Op type counts; onnxruntime's own domains shortened (com.microsoft.nchwc -> nchwc:)."""
    return Counter(
        f"{n.domain.split('.')[-1]}:{n.op_type}" if n.domain else n.op_type
        for n in model.graph.node
    )


def optimized_counts(model: bytes | str) -> Counter[str]:
    """Op counts of the graph onnxruntime actually runs (after its ORT_ENABLE_ALL optimizations)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "optimized.onnx")
        ort.InferenceSession(model, session_options(1, path), providers=["CPUExecutionProvider"])
        return op_counts(onnx.load(path))


def count_diff(ours: Counter[str], theirs: Counter[str]) -> str:
    keys = sorted(set(ours) | set(theirs), key=lambda k: -(ours[k] + theirs[k]))
    return ", ".join(f"{k} {ours[k]}/{theirs[k]}" for k in keys if ours[k] != theirs[k]) or "same"


def inference(
    m: Model, program: Any, p2o: dict[str, Any], threads: int, runs: int, warmup: int
) -> list[str]:
    """One latency row: graphgate's session as compile() builds it vs Paddle2ONNX's ONNX, with
    the same thread settings; plus an A/A control (a second graphgate session of the same model:
    how far apart two identical sessions measure here, i.e. the noise floor)."""
    options = SessionOptions(intra_op_threads=threads, use_cuda=False)
    compiled, control = compile(program, options), compile(program, options)
    feeds = feeds_for(m, compiled.program.inputs[0].name)
    outputs = list(compiled.output_names)
    runners: dict[str, Callable[[], object]] = {
        "ours": partial(compiled.session.run, outputs, feeds),
        "ours_run": partial(compiled.run, feeds),
        "control": partial(control.session.run, outputs, feeds),
    }
    theirs, their_feeds = None, {}
    if "error" not in p2o:
        theirs = ort.InferenceSession(
            p2o["onnx"], session_options(threads), providers=["CPUExecutionProvider"]
        )
        their_feeds = {theirs.get_inputs()[0].name: next(iter(feeds.values()))}
        runners["theirs"] = partial(theirs.run, None, their_feeds)
    times = latency(runners, runs, warmup)
    ours = statistics.median(times["ours"])
    note = (
        f"run() with scope checks {stat(times['ours_run'])}; "
        f"A/A control {statistics.median(times['control']) / ours:.3f}"
    )
    if theirs is None:
        return [m.label, str(threads), stat(times["ours"]), p2o["error"], "n/a", "n/a", note]
    a = compiled.session.run(outputs, feeds)[0]
    b = theirs.run(None, their_feeds)[0]
    diff = float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max())
    ratio = ours / statistics.median(times["theirs"])
    return [
        m.label, str(threads), stat(times["ours"]), stat(times["theirs"]),
        f"{ratio:.3f} " + ("(met)" if ratio <= 1.05 else "(NOT met)"),
        f"{diff:.3g} (max abs output {float(np.abs(b).max()):.3g})", note,
    ]  # fmt: skip


def compare_graphs(m: Model, ours: bytes, theirs_path: str) -> list[str]:
    ours_raw, theirs_raw = op_counts(onnx.load_from_string(ours)), op_counts(onnx.load(theirs_path))
    ours_opt, theirs_opt = optimized_counts(ours), optimized_counts(theirs_path)
    return [
        m.label,
        f"{sum(ours_raw.values())} / {sum(theirs_raw.values())}",
        count_diff(ours_raw, theirs_raw),
        f"{sum(ours_opt.values())} / {sum(theirs_opt.values())}",
        count_diff(ours_opt, theirs_opt),
    ]


# -- report ------------------------------------------------------------------------------------


def stat(times: list[float]) -> str:
    return f"{ms(statistics.median(times))} / {ms(float(np.percentile(times, 90)))}"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms" if seconds >= 0.01 else f"{seconds * 1e3:.2f} ms"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="bytes-to-session runs per side")
    parser.add_argument("--runs", type=int, default=100, help="timed inference runs per model")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument(
        "--threads",
        default=",".join(dict.fromkeys(["1", str(os.cpu_count() or 1)])),
        help="intra-op thread counts for the latency runs, comma-separated (the same for both)",
    )
    parser.add_argument("--models", default=",".join(m.key for m in MODELS))
    args = parser.parse_args()
    models = [m for m in MODELS if m.key in args.models.split(",")]
    thread_counts = [int(t) for t in args.threads.split(",")]
    files = model_files(models)
    python = paddle2onnx_python()

    session_rows, latency_rows, breakdown_rows, graph_rows = [], [], [], []
    p2o_versions: dict[str, str] = {}
    for m in models:
        program, params = files[m.key]
        print(f"== {m.label}", flush=True)
        stages, first, compiled, p2o = bytes_to_session(python, m, program, params, args.repeat)
        ours = stages.median("total")
        p2o_versions = p2o.get("versions", p2o_versions)
        if "error" in p2o:
            print(f"   paddle2onnx failed: {p2o['error']}")
            session_rows.append([m.label, ms(ours), p2o["error"], "n/a", "<= 0.50", ms(first)])
        else:
            ratio = ours / p2o["total_s"]
            session_rows.append([
                m.label, ms(ours),
                f"{ms(p2o['total_s'])} (convert {ms(p2o['convert_s'])} + session "
                f"{ms(p2o['session_s'])}; import {p2o['import_s']:.1f} s excluded)",
                f"{ratio:.2f}", "<= 0.50 " + ("met" if ratio <= 0.5 else "NOT met"),
                f"{ms(first)} / {ms(p2o['first_s'])}",
            ])  # fmt: skip
        named = ["lower", "gate check (onnx.checker full)", "shape cross-check (ONNX inference)",
                 "onnxruntime session"]  # fmt: skip
        # compile() minus its timed stages, run by run (medians do not add up)
        timed = [stages.times[n] for n in named if n in stages.times]
        per_run = zip(stages.times["compile"], *timed, strict=True)
        rest = statistics.median(c - sum(parts) for c, *parts in per_run)
        breakdown_rows.append(
            [m.label]
            + [ms(stages.median(s)) for s in ["read files", "validate", *named]]
            + [ms(rest), ms(ours), ms(first)]
        )
        print("   graphgate " + ", ".join(f"{r}" for r in breakdown_rows[-1][1:]))

        for threads in thread_counts:
            row = inference(m, compiled.program, p2o, threads, args.runs, args.warmup)
            latency_rows.append(row)
            print("   latency " + " | ".join(row[1:]), flush=True)
        if "error" not in p2o:
            graph_rows.append(compare_graphs(m, compiled.onnx_bytes, p2o["onnx"]))

    command = "python benchmarks/bench_executor.py" + "".join(f" {a}" for a in sys.argv[1:])
    versions = (
        f"Python {sys.version.split()[0]}, onnxruntime {ort.__version__} (CPU provider), "
        f"onnx {onnx.__version__}; Paddle2ONNX side in benchmarks/.venv-paddle2onnx: "
        + ", ".join(f"{k} {v}" for k, v in p2o_versions.items())
    )
    text = f"""# Executor benchmark: graphgate against Paddle2ONNX

`{command}` on {os.cpu_count()} CPUs ({cpu_model()}), {platform.system()} {platform.release()}.
{versions}.

## Bytes to a ready session

Median of {args.repeat} runs per side after one warm-up; the two sides' runs are interleaved.
graphgate: read both files, `validator.validate`, `executor.compile` (lower, ONNX gate, shape
cross-check, onnxruntime CPU session). Paddle2ONNX: `paddle2onnx.export` as its command line runs
it (opset {ONNX_OPSET} with auto-upgrade, onnx checker, Polygraphy constant folding) on the same
files, then an onnxruntime CPU session on its output, in a worker process of its own venv that
times itself (its import excluded). Goal: graphgate at most half of Paddle2ONNX's time.

{table(["model", "graphgate", "Paddle2ONNX", "ratio", "goal",
        "warm-up run (graphgate / Paddle2ONNX in a fresh worker)"], session_rows)}

## Inference latency, batch 1

Both ONNX models on onnxruntime {ort.__version__} CPU in one process, intra-op threads as
given (the same for both), inter-op 1, default graph optimizations; {args.warmup} warm-up runs, then
{args.runs} runs each, in blocks of 10 that take turns (each block after 2 untimed runs).
graphgate's figure is `session.run` on the session `compile()` built (the same work as
Paddle2ONNX's column); `run()` adds the per-request scope checks. Goal: ratio <= 1.05.
Same random input for both (float32 [1, 3, 224, 224] images; int64 [1, {SEQ_LEN}] ids).

{table(["model", "intra-op threads", "graphgate median / p90", "Paddle2ONNX median / p90",
        "ratio (goal <= 1.05)", "max abs diff", "note"], latency_rows)}

## Where graphgate's time goes (medians)

{table(["model", "read files", "validate", "lower", "gate check", "shape cross-check",
        "session", "other in compile (serialize, options)", "total", "warm-up run"],
       breakdown_rows)}

## The two ONNX graphs (graphgate / Paddle2ONNX node counts)

"Optimized" is the graph onnxruntime runs after its optimizations (`optimized_model_filepath`);
`nchwc:` and `microsoft:` are its internal fused/blocked-layout ops. Only op types whose counts
differ are listed.

{table(["model", "nodes", "op types that differ", "nodes optimized",
        "op types that differ, optimized"], graph_rows)}
"""  # fmt: skip
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
