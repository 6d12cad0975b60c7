"""Corpus latency: graphgate against Paddle2ONNX 2.1.0 and Paddle Inference's predictor.

Usage: PYTHONPATH=. python benchmarks/bench_latency.py [--out benchmarks/results/latency.md]
       [--follow] [--budget 16] [--threads 2] [--variant LABEL:key=value,...] [NAME...]

For each tests/corpus model (default: all; exports cached under tests/.cache/ecosystem/, see
tests/corpus/compare.py) at batch 1 and 8, on the corpus' own feeds (the same arrays to every
engine):
  - graphgate: the legacy program validated and compiled as the service compiles it (the
    service's session settings, CPU, `--threads` intra-op threads), timed through
    CompiledModel.run (its request checks included);
  - Paddle2ONNX 2.1.0's ONNX of the same program (converted in benchmarks/.venv-paddle2onnx,
    as benchmarks/bench_corpus.py does) in onnxruntime with graphgate's session settings;
  - Paddle Inference's predictor on the same program: IR optimizations, oneDNN on,
    `--threads` math-library threads (what a Paddle Serving or FastDeploy CPU user runs).
graphgate's answer is compared with the predictor's (max |diff| / (1e-5 + 1e-4 |theirs|), the
corpus tolerance); where it is over 1, with Paddle's Executor too, to tell whose answer moved.

Timing: the onnxruntime engines (graphgate, Paddle2ONNX's ONNX, the variants) run one run each
in turn, in a random order each cycle, so that graphgate's ratio to each of them is
the median of ratios of runs made moments apart (with a 90% bootstrap interval): a machine whose
speed drifts, or another process's burst, moves both sides of a ratio alike. Timed in blocks,
as before 2026-12-04, a second session of the same graph (A/A) was within 5% of graphgate on
only 22 of 68 programs at batch 1. The predictor runs in blocks between those cycles (its
OpenMP threads spin for 200 ms after a parallel region and would slow whatever ran next), each
followed by a pause and by untimed cycles of the others (see WARM_AFTER_PREDICTOR_S); the number
of runs per engine follows from a time budget per model (`--budget` seconds, both batches), at
least MIN_RUNS. Median per engine and batch; ratios are graphgate / the other, in the same run.

Each model runs in a child process (a native crash or a leak in one engine costs one row); the
parent keeps one Paddle2ONNX worker for the whole corpus. `--variant` adds a graphgate session
with other settings to the same cycles (SessionOptions fields, `opt=basic|extended|all`,
`mode=parallel`, or onnxruntime session config keys; empty: a second session of the same
settings, the noise floor; `raw`: graphgate's graph in a session of its own, run without
CompiledModel.run), for before/after figures in one run.
The table is rewritten after every model (and the rows saved beside it as .json, which
`--merge` reads to rerun some models of a run); a "## Findings" section already in the file is
kept.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

ROOT: Final = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

RESULTS: Final = ROOT / "benchmarks" / "results" / "latency.md"
FINDINGS: Final = "## Findings"
BATCHES: Final = (1, 8)
SEED: Final = 0
MIN_RUNS: Final = 5
MAX_RUNS: Final = 200
BLOCKS: Final = 8
# Paddle's libiomp5 threads spin for KMP_BLOCKTIME (200 ms) after a parallel region: a pause
# longer than that after each of its blocks keeps them off the next engine's cores.
SETTLE_S: Final = 0.25
# Untimed running before each block; longer after the predictor's. NOTE: its threads keep
# the CPUs busy for longer than SETTLE_S: with one untimed run (or 20 ms of them) after its
# pause, the engine that followed it timed graphgate's graph at batch 1 up to 1.7x slower than
# a second session of the same graph (topformer_tiny 1.27 against 0.80 ms, fcn_hrnet 3.04
# against 1.67); with 0.3 s, 0.69 against 0.68 ms (2026-12-03, a quiet machine).
WARM_S: Final = 0.02
WARM_AFTER_PREDICTOR_S: Final = 0.3
CHILD_TIMEOUT_S: Final = 900
MARK: Final = "@@LATENCY "
GRAPHGATE, P2O, PADDLE = "graphgate", "Paddle2ONNX", "Paddle Inference"
AA: Final = "A/A"  # the variant label of a second session with the same settings
BOOTSTRAP: Final = 2000  # resamples for a paired ratio's interval


# -- the child: one model, every engine --------------------------------------------------------


Runner = Callable[[dict[str, np.ndarray]], list[np.ndarray]]


@dataclass(frozen=True)
class Timing:
    medians: dict[str, float]  # seconds per run, per engine
    paired: dict[str, list[float]]  # graphgate / engine: [median, low, high] of per-cycle ratios


def service_options(threads: int) -> Any:
    """The session settings the service compiles with (its defaults), on CPU, `threads` threads."""
    from server.settings import Settings

    options = Settings().session_options()
    return dataclasses.replace(options, intra_op_threads=threads, use_cuda=False)


def variant_session(onnx_bytes: bytes, options: Any, spec: str) -> Any:
    """An onnxruntime session of graphgate's ONNX with `options` changed by `spec`
    (`key=value,...`)."""
    import onnxruntime as ort

    from executor.session import ort_session_options

    fields = {f.name: f.type for f in dataclasses.fields(options)}
    changed, extra = {}, {}
    for item in filter(None, spec.split(",")):
        key, value = item.split("=", 1)
        if key in fields:
            changed[key] = (
                value.lower() in ("1", "true") if "bool" in str(fields[key]) else int(value)
            )
        else:
            extra[key] = value
    session_options = ort_session_options(dataclasses.replace(options, **changed))
    levels = {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }
    if "opt" in extra:
        session_options.graph_optimization_level = levels[extra.pop("opt")]
    if extra.pop("mode", "") == "parallel":
        session_options.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    for key, value in extra.items():
        session_options.add_session_config_entry(key, value)
    return ort.InferenceSession(onnx_bytes, session_options, providers=["CPUExecutionProvider"])


def paddle_predictor(where: Path, threads: int) -> Runner:
    """Paddle Inference's predictor of the legacy program: IR optimizations and oneDNN on."""
    import paddle.inference as paddle_infer

    config = paddle_infer.Config(str(where / "model.pdmodel"), str(where / "model.pdiparams"))
    config.disable_gpu()
    config.switch_ir_optim(True)
    config.enable_mkldnn()
    config.set_cpu_math_library_num_threads(threads)
    config.disable_glog_info()
    predictor = paddle_infer.create_predictor(config)
    inputs = {name: predictor.get_input_handle(name) for name in predictor.get_input_names()}
    outputs = [predictor.get_output_handle(name) for name in predictor.get_output_names()]

    def run(feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        for name, handle in inputs.items():
            handle.reshape(feeds[name].shape)
            handle.copy_from_cpu(feeds[name])
        predictor.run()
        return [handle.copy_to_cpu() for handle in outputs]

    return run


def model_runner(model: Any) -> Runner:
    """graphgate's CompiledModel.run (the request's checks included), fetches in order."""

    def run(feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return list(model.run(feeds).values())

    return run


def onnx_runner(session: Any) -> Runner:
    wanted = [i.name for i in session.get_inputs()]
    names = [o.name for o in session.get_outputs()]

    def run(feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return list(session.run(names, {k: feeds[k] for k in wanted}))

    return run


def distance(ours: list[np.ndarray], theirs: list[np.ndarray]) -> float | str:
    """The worst |diff| / tolerance over the fetches (a string when they do not match up)."""
    from tests.corpus import compare

    if len(ours) != len(theirs):
        return f"{len(ours)} fetches vs {len(theirs)}"
    worst = 0.0
    for got, expected in zip(ours, theirs, strict=True):
        if got.shape != expected.shape:
            return f"shape {list(got.shape)} vs {list(expected.shape)}"
        if not np.issubdtype(expected.dtype, np.floating):
            if not np.array_equal(got, expected):
                return "integers differ"
            continue
        worst = max(worst, compare.worst_ratio(got.astype(expected.dtype), expected))
    return worst


def warm(run: Callable[[], object], seconds: float) -> None:
    """Untimed runs, at least one and for at least `seconds`."""
    until = time.perf_counter() + seconds
    run()
    while time.perf_counter() < until:
        run()


def variant_note(variants: list[str]) -> str:
    """What the variant columns are, for the ones this run has."""
    said = {
        "": "a second session of graphgate's graph with the same settings (the noise)",
        "raw": "graphgate's graph in a session of its own run bare, without CompiledModel.run's "
        "request checks (the graph alone, timed as Paddle2ONNX's is)",
    }
    parts = [
        f"`{label}`: {said.get(settings, 'graphgate with ' + settings)}"
        for label, settings in (spec.split(":", 1) for spec in variants)
    ]
    return " Variant columns: " + "; ".join(parts) + "." if parts else ""


def timed(runners: Mapping[str, Callable[[], object]], budget_s: float) -> Timing:
    """Each engine's median seconds, and graphgate's paired ratio to each other onnxruntime
    engine. The onnxruntime engines run one run each in turn (in a random order each cycle),
    so that a ratio compares runs made moments apart; the predictor runs in blocks between
    those cycles, each followed by a pause (its idle OpenMP threads spin) and by untimed runs
    of the others (WARM_AFTER_PREDICTOR_S)."""
    estimate = {}
    for name, run in runners.items():
        for _ in range(2):
            started = time.perf_counter()
            run()
            estimate[name] = time.perf_counter() - started
    pauses = BLOCKS * SETTLE_S if PADDLE in runners else 0.0
    runs = int((budget_s - pauses) / max(sum(estimate.values()), 1e-6)) - BLOCKS
    runs = max(MIN_RUNS, min(MAX_RUNS, runs))
    block = math.ceil(runs / min(BLOCKS, max(2, runs // 2)))
    times: dict[str, list[float]] = {name: [] for name in runners}
    cycling = [name for name in runners if name != PADDLE]
    # A fresh order each cycle: with a rotation, each engine would always follow the same
    # other one, and whatever one run leaves behind (caches, a pool's threads) would fall on
    # the same engine every time.
    orders = np.random.default_rng(SEED)
    for b in range(math.ceil(runs / block)):
        count = min(block, runs - b * block)
        if PADDLE in runners:
            predictor = runners[PADDLE]
            warm(predictor, WARM_S)
            for _ in range(count):
                started = time.perf_counter()
                predictor()
                times[PADDLE].append(time.perf_counter() - started)
            time.sleep(SETTLE_S)
        warm(lambda: [runners[name]() for name in cycling], WARM_AFTER_PREDICTOR_S)
        for _ in range(count):
            for name in orders.permutation(cycling):
                started = time.perf_counter()
                runners[name]()
                times[name].append(time.perf_counter() - started)
    medians = {name: statistics.median(values) for name, values in times.items()}
    ours = np.asarray(times[GRAPHGATE])
    paired = {
        name: paired_ratio(ours / np.asarray(times[name])) for name in cycling if name != GRAPHGATE
    }
    return Timing(medians, paired)


def paired_ratio(ratios: np.ndarray) -> list[float]:
    """The median of per-cycle ratios and its 90% bootstrap interval: [median, low, high]."""
    rng = np.random.default_rng(SEED)
    resampled = rng.choice(ratios, size=(BOOTSTRAP, ratios.size), replace=True)
    low, high = np.quantile(np.median(resampled, axis=1), [0.05, 0.95])
    return [float(np.median(ratios)), float(low), float(high)]


def child(args: argparse.Namespace) -> dict[str, Any]:
    """One model's row (printed as JSON by the child process)."""
    import onnx

    from benchmarks.bench_executor import optimized_counts
    from executor import compile
    from tests.corpus import compare, zoo
    from validator import ValidationFailed, validate

    where = Path(args.where)
    files = compare.Files.read(where)
    entry = zoo.ENTRIES[args.name]
    row: dict[str, Any] = {"notes": [], "ms": {}, "paired": {}, "worst": {}}
    options = service_options(args.threads)
    engines: dict[str, Runner] = {}
    try:
        model = compile(validate(files.program, files.params), options)
    except ValidationFailed as failed:
        row["notes"].append(f"graphgate rejects it: {', '.join(dict.fromkeys(failed.codes))}")
        return row
    engines[GRAPHGATE] = model_runner(model)
    row["nodes"] = [len(onnx.load_from_string(model.onnx_bytes).graph.node), None]
    row["runs_nodes"] = [sum(optimized_counts(model.onnx_bytes).values()), None]
    for spec in args.variant:
        label, settings = spec.split(":", 1)
        if settings == "raw":  # graphgate's graph without CompiledModel.run's checks
            # NOTE: a session of its own. Run through graphgate's session, its runs kept that
            # session's threads spinning for graphgate's next run: graphgate came out 5-20%
            # faster than a second session of the same graph at batch 1 (A/A 1.08-1.19).
            engines[label] = onnx_runner(variant_session(model.onnx_bytes, options, ""))
            continue
        session = variant_session(model.onnx_bytes, options, settings)
        variant = dataclasses.replace(model, session=session)
        engines[label] = model_runner(variant)
    if args.p2o_error:
        row["notes"].append(f"Paddle2ONNX: {args.p2o_error[:200]}")
    else:
        import onnxruntime as ort

        from executor.session import ort_session_options

        session = ort.InferenceSession(
            args.p2o, ort_session_options(options), providers=["CPUExecutionProvider"]
        )
        engines[P2O] = onnx_runner(session)
        row["nodes"][1] = len(onnx.load(args.p2o).graph.node)
        row["runs_nodes"][1] = sum(optimized_counts(args.p2o).values())
    try:
        engines[PADDLE] = paddle_predictor(where, args.threads)
    except Exception as e:  # the predictor's failure is a row's note
        row["notes"].append(f"Paddle Inference fails: {str(e).strip().splitlines()[-1][:200]}")
    for batch in BATCHES:
        feeds = compare.feeds(entry, batch, SEED)
        answers = {}
        for name, run in list(engines.items()):
            try:
                answers[name] = run(feeds)
            except Exception as e:  # an engine that cannot run this batch
                row["notes"].append(f"{name} at batch {batch}: {str(e).strip()[:200]}")
                del engines[name]
        if GRAPHGATE not in answers:
            return row
        if PADDLE in answers:
            worst = distance(answers[GRAPHGATE], answers[PADDLE])
            row["worst"][str(batch)] = worst
            if isinstance(worst, str) or worst > 1:
                row["notes"].append(exceeded(files, feeds, answers, batch, worst, args.name))
        runners = {name: functools.partial(run, feeds) for name, run in engines.items()}
        budget = args.budget * batch / sum(BATCHES)  # the larger batch gets the larger share
        timing = timed(runners, budget)
        row["ms"][str(batch)] = {k: v * 1e3 for k, v in timing.medians.items()}
        row["paired"][str(batch)] = timing.paired
    return row


def exceeded(
    files: Any,
    feeds: dict[str, np.ndarray],
    answers: dict[str, Any],
    batch: int,
    worst: Any,
    name: str,
) -> str:
    """Why graphgate and the predictor disagree: both against Paddle's Executor."""
    from tests.corpus import compare

    executor = compare.run_paddle(files, feeds)
    ours, theirs = distance(answers[GRAPHGATE], executor), distance(answers[PADDLE], executor)
    shown = [f"{x:.3g}" if isinstance(x, float) else x for x in (worst, ours, theirs)]
    noise = " (a float32-noise model: the corpus judges it against float64)" if (
        name in compare.FLOAT64_JUDGED) else ""  # fmt: skip
    return (
        f"batch {batch}: graphgate vs Paddle Inference {shown[0]} x tolerance; vs Paddle's "
        f"Executor: graphgate {shown[1]}, Paddle Inference {shown[2]}{noise}"
    )


# -- the parent: exports, Paddle2ONNX, one child per model, the table --------------------------


@dataclass
class Row:
    name: str
    ops: int = 0
    result: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def run_child(
    row: Row, where: Path, p2o: Path | None, p2o_error: str, args: argparse.Namespace
) -> None:
    command = [sys.executable, str(Path(__file__).resolve()), "--child", row.name,
               "--where", str(where), "--threads", str(args.threads), "--budget", str(args.budget)]  # fmt: skip
    command += ["--p2o", str(p2o)] if p2o else ["--p2o-error", p2o_error]
    for spec in args.variant:
        command += ["--variant", spec]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GLOG_minloglevel": "2"}
    try:
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        row.notes.append(f"timed out after {CHILD_TIMEOUT_S} s")
        return
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith(MARK)]
    if not lines:
        tail = [ln for ln in done.stderr.strip().splitlines() if ln.strip()][-2:]
        row.notes.append(f"child died (exit {done.returncode}): {' | '.join(tail)[:300]}")
        return
    row.result = json.loads(lines[-1].removeprefix(MARK))
    row.notes += row.result.get("notes", [])


def cell_ms(ms: dict[str, Any], batch: int, engine: str) -> str:
    value = ms.get(str(batch), {}).get(engine)
    return "-" if value is None else f"{value:.2f}"


def ratio(ms: dict[str, Any], batch: int, engine: str, base: str = GRAPHGATE) -> float | None:
    times = ms.get(str(batch), {})
    if engine not in times or base not in times:
        return None
    return float(times[base] / times[engine])


def interval(result: dict[str, Any], batch: int, engine: str) -> list[float] | None:
    """graphgate / engine as [median, low, high] of the paired ratios (None: not cycled with
    graphgate, as the predictor is not, or a row from before the paired timing)."""
    found = result.get("paired", {}).get(str(batch), {}).get(engine)
    return list(found) if found else None


def over(result: dict[str, Any], batch: int, engine: str) -> float | None:
    """graphgate / engine: the paired ratio where there is one, else the medians' ratio."""
    paired = interval(result, batch, engine)
    return paired[0] if paired else ratio(result.get("ms", {}), batch, engine)


def surely_over(result: dict[str, Any], batch: int, engine: str) -> bool:
    """More than 1.05x with the whole 90% interval of the paired ratio above 1.05."""
    paired = interval(result, batch, engine)
    return paired is not None and paired[1] > 1.05


def ratio_cell(value: float | None) -> str:
    if value is None:
        return "-"
    return f"**{value:.2f}**" if value > 1.05 else f"{value:.2f}"


def interval_cell(result: dict[str, Any], batch: int, engine: str) -> str:
    cell = ratio_cell(over(result, batch, engine))
    paired = interval(result, batch, engine)
    return cell if paired is None else f"{cell} ({paired[1]:.2f}-{paired[2]:.2f})"


def variant_cell(result: dict[str, Any], batch: int, label: str) -> str:
    """variant / graphgate (the inverse of the paired ratio), with its interval."""
    paired = interval(result, batch, label)
    if paired is None:
        found = ratio(result.get("ms", {}), batch, GRAPHGATE, label)
        return f"{found:.2f}" if found else "-"
    median, low, high = (1 / v for v in paired)
    return f"{median:.2f} ({high:.2f}-{low:.2f})"


def worst_cell(worst: dict[str, Any]) -> str:
    if not worst:
        return "-"
    values = list(worst.values())
    if any(isinstance(w, str) for w in values):
        return "differs"
    top = max(values)
    return f"{top:.2g}" + (" (over)" if top > 1 else "")


def table(rows: list[Row], variants: list[str]) -> list[str]:
    head = (
        "| model | ops | nodes gg / p2o | runs gg / p2o | graphgate ms b1 | b8 | Paddle2ONNX ms b1 | b8 | gg/p2o b1 | b8 "
        "| Paddle Inference ms b1 | b8 | gg/PI b1 | b8 | gg vs PI worst |"
    )
    labels = [spec.split(":", 1)[0] for spec in variants]
    for label in labels:
        head += f" {label} ms b1 | b8 | {label} / graphgate b1 | b8 |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for row in rows:
        ms = row.result.get("ms", {})
        nodes = row.result.get("nodes") or [None, None]
        shown = " / ".join("-" if n is None else str(n) for n in nodes)
        runs = row.result.get("runs_nodes") or [None, None]
        cells = [
            row.name,
            str(row.ops),
            shown,
            " / ".join("-" if n is None else str(n) for n in runs),
        ]
        cells += [cell_ms(ms, b, GRAPHGATE) for b in BATCHES]
        cells += [cell_ms(ms, b, P2O) for b in BATCHES]
        cells += [interval_cell(row.result, b, P2O) for b in BATCHES]
        cells += [cell_ms(ms, b, PADDLE) for b in BATCHES]
        cells += [ratio_cell(ratio(ms, b, PADDLE)) for b in BATCHES]
        cells.append(worst_cell(row.result.get("worst", {})))
        for label in labels:
            cells += [cell_ms(ms, b, label) for b in BATCHES]
            cells += [variant_cell(row.result, b, label) for b in BATCHES]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def summary(rows: list[Row], variants: list[str]) -> list[str]:
    lines = []
    for other in (PADDLE, P2O):
        for batch in BATCHES:
            ratios = {row.name: r for row in rows if (r := over(row.result, batch, other))}
            if not ratios:
                continue
            slower = [name for name, r in ratios.items() if r > 1.05]
            sure = [row.name for row in rows if surely_over(row.result, batch, other)]
            line = (
                f"- graphgate / {other}, batch {batch}: median "
                f"{statistics.median(ratios.values()):.2f} over {len(ratios)} models; more than "
                f"1.05x on {len(slower)}" + (f" ({', '.join(slower)})" if slower else "")
            )
            if other != PADDLE:
                line += f"; with the whole 90% interval above 1.05 on {len(sure)}" + (
                    f" ({', '.join(sure)})" if sure else ""
                )
            lines.append(line)
    for label in [spec.split(":", 1)[0] for spec in variants]:
        for batch in BATCHES:
            found = [1 / r for row in rows if (r := over(row.result, batch, label))]
            if len(found) >= 2:
                deciles = (
                    statistics.quantiles(found, n=10)
                    if len(found) >= 10
                    else [min(found), max(found)]
                )
                lines.append(
                    f"- {label} / graphgate, batch {batch}"
                    + (" (a second session of the same graph: the noise)" if label == AA else "")
                    + f": median {statistics.median(found):.2f}, 80% of "
                    f"{len(found)} models within {deciles[0]:.2f}-{deciles[-1]:.2f}"
                )
    either = {
        row.name
        for row in rows
        for other in (PADDLE, P2O)
        for batch in BATCHES
        if (r := over(row.result, batch, other)) and r > 1.05
    }
    lines.append(
        f"- graphgate more than 1.05x either peer at either batch: {len(either)} of "
        f"{sum(1 for row in rows if row.result.get('ms'))} models timed"
    )
    return lines


def write_keeping_findings(out: Path, lines: list[str]) -> None:
    """Writes `lines` to `out`, followed by the "## Findings" section `out` already has (a
    placeholder when it has none): findings are written by hand, tables by the run."""
    kept = ""
    if out.exists() and FINDINGS in (text := out.read_text()):
        kept = text[text.index(FINDINGS) :]
    out.write_text("\n".join(lines) + "\n" + (kept or f"{FINDINGS}\n\n(not written yet)\n"))


def write(out: Path, rows: list[Row], context: dict[str, str], variants: list[str]) -> None:
    notes = [f"- {row.name}: {note}" for row in rows for note in row.notes]
    lines = [
        "# Corpus latency: graphgate vs Paddle2ONNX 2.1.0 and Paddle Inference",
        "",
        f"Command: `{context['command']}` ({len(rows)} of {context['count']} models; "
        f"{context['when']}). Machine: {context['machine']}.",
        "",
        "Median milliseconds per run at batch 1 and 8 on the corpus' own feeds (the same arrays "
        f"for all engines), {context['threads']} threads each: graphgate's ONNX compiled as the "
        "service compiles it (its session settings, CPU) and timed through CompiledModel.run; "
        "Paddle2ONNX 2.1.0's ONNX of the same legacy program in onnxruntime with the same "
        "settings; Paddle Inference's predictor (IR optimizations, oneDNN, "
        "set_cpu_math_library_num_threads). The onnxruntime engines run one run each in turn "
        "(a random order each cycle), the predictor in blocks between those cycles, each followed by "
        f"a {SETTLE_S:g} s pause and {WARM_AFTER_PREDICTOR_S:g} s of untimed runs of the others "
        "(its threads keep the CPUs busy after it). Ratios are graphgate / the other: against "
        "the onnxruntime engines the median of the ratios of runs made in the same cycle, with "
        "its 90% bootstrap interval in brackets; against the predictor the medians' ratio; "
        "**bold** is more than 1.05x. \"nodes\": ONNX nodes of graphgate's and Paddle2ONNX's "
        'files; "runs": nodes of the graph onnxruntime runs after its optimizations. '
        '"gg vs PI worst": max |graphgate - predictor| / '
        "(1e-5 + 1e-4 |predictor|) over both batches (the corpus tolerance is 1; where over, the "
        "notes compare both with Paddle's Executor)." + variant_note(variants),
        "",
        *table(rows, variants),
        "",
        "## Summary",
        "",
        *summary(rows, variants),
        "",
        "## Notes",
        "",
        *(notes or ["- none"]),
        "",
    ]
    write_keeping_findings(out, lines)
    saved = {
        "context": context,
        "variants": variants,
        "rows": [dataclasses.asdict(r) for r in rows],
    }
    out.with_suffix(".json").write_text(json.dumps(saved, indent=1) + "\n")


def merged(kept: list[Row], rows: list[Row]) -> list[Row]:
    """The rows `kept` of an earlier run, with this run's rows in place of theirs."""
    fresh = {row.name: row for row in rows}
    return [fresh.get(row.name, row) for row in kept] + [
        r for r in rows if r.name not in {k.name for k in kept}
    ]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("names", nargs="*")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--follow", action="store_true", help="wait for another process's exports")
    parser.add_argument(
        "--available", action="store_true", help="only the models already exported (no waiting)"
    )
    parser.add_argument(
        "--merge",
        action="store_true",
        help="rerun the named models of the run saved in --out's .json, keeping its other rows",
    )
    parser.add_argument("--budget", type=float, default=16.0, help="timing seconds per model")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--variant", action="append", default=[], help="LABEL:key=value,...")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--where", help=argparse.SUPPRESS)
    parser.add_argument("--p2o", help=argparse.SUPPRESS)
    parser.add_argument("--p2o-error", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.name = args.child
        print(MARK + json.dumps(child(args)), flush=True)
        return 0

    from benchmarks.bench_corpus import Converter, export_of
    from tests.corpus import compare, zoo

    names = args.names or list(zoo.ENTRIES)
    load = os.getloadavg()
    context = {
        "command": "PYTHONPATH=. python benchmarks/bench_latency.py"
        + "".join(f" --variant '{v}'" for v in args.variant)
        + (f" --budget {args.budget:g}" if args.budget != 16.0 else "")
        + (" " + " ".join(args.names) if args.names else ""),
        "count": str(len(names)),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "threads": str(args.threads),
        "machine": f"{os.cpu_count()} CPUs, load average {load[0]:.1f} at the start",
    }
    out, rows = Path(args.out), []
    kept: list[Row] = []
    if args.merge:  # the earlier run's rows and context; this run's command is added to it
        saved = json.loads(out.with_suffix(".json").read_text())
        kept = [Row(**r) for r in saved["rows"]]
        rerun = f"; rerun: `{context['command']}` ({context['when']}, {context['machine']})"
        context = {**saved["context"], "command": saved["context"]["command"] + rerun}
    with tempfile.TemporaryDirectory() as tmp:
        converter = Converter(Path(tmp))
        try:
            for name in names:
                if args.available and compare.cached(name, "legacy") is None:
                    continue
                row = Row(name)
                rows.append(row)
                where = export_of(name, "legacy", args.follow)
                if isinstance(where, str):
                    row.notes.append(
                        f"Paddle export failed: {where.strip().splitlines()[-1][:200]}"
                    )
                    continue
                row.ops = compare.op_count(compare.Files.read(where))
                onnx_path = Path(tmp) / f"{name}.onnx"
                converted = converter.convert(where, onnx_path)
                error = converted.get("error", "")
                run_child(row, where, None if error else onnx_path, error, args)
                onnx_path.unlink(missing_ok=True)
                print(f"{name}: {json.dumps(row.result.get('ms'))} {row.notes}", flush=True)
                write(out, merged(kept, rows), context, args.variant)
        finally:
            converter.close()
    end = os.getloadavg()[0]
    context["machine"] += f", {end:.1f} at the end of the run (2 cores shared with other work)"
    write(out, merged(kept, rows), context, args.variant)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
