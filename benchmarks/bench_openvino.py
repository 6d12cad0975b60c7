"""The corpus on onnxruntime's OpenVINO execution provider against graphgate's CPU sessions.

Usage: PYTHONPATH=. python benchmarks/bench_openvino.py [--rounds 4] [--block-s 0.5]
       [--threads 2] [--no-install] [--out benchmarks/results/openvino.md] [NAME...]

Issue 25 asks whether an optional execution provider (onnxruntime's OpenVINO build) would make
convolution-heavy programs as fast as Paddle Inference's oneDNN, and keep every answer within
the corpus tolerance. onnxruntime-openvino ships the same `onnxruntime` import package as
onnxruntime-gpu, so it cannot live in graphgate's environment: it is measured in
benchmarks/.venv-openvino (made by this script; OPENVINO_REQUIREMENTS), through
benchmarks/openvino_worker.py.

For each tests/corpus model (default: all; exports cached under tests/.cache/ecosystem/) at
batch 1 and 8, on the corpus' own feeds, three engines run graphgate's ONNX as the service
compiles it:
  - graphgate: its onnxruntime CPU session with the service's settings, in a worker of its
    own (graphgate's Python), run bare as the other two are (CompiledModel.run's request
    checks would sit on top of any provider; the verdict is CompiledModel.run's). Timed in
    this process, next to Paddle and a second session, the same session ran a 0.13 ms model
    at 0.17 ms;
  - OpenVINO: a session in the OpenVINO build with its execution provider (FP32, the same
    thread count; nodes it does not take fall back to that build's CPU provider);
  - "its CPU": a session in the OpenVINO build with its CPU provider alone, which tells the
    provider's share of a difference from the onnxruntime version's.
Each round times every engine in a block (`--block-s` seconds, at least MIN_RUNS runs) in a
random order, with a pause after each (OpenVINO's and onnxruntime's idle threads spin), each
engine alone on the CPUs: in one process, the two builds' thread pools slowed each other by up to
1.6x. The ratio to graphgate is the median of the rounds' ratios of block medians, with the
rounds' range. OpenVINO's answers are judged as the corpus judges graphgate's
(tests/corpus/compare.py outputs_verdict: against Paddle's Executor at batch 1 and 2, float64
where the corpus does), beside graphgate's verdict.

Writes the table; a "## Findings" section already in the file is kept.
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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

ROOT: Final = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from benchmarks.bench_executor import end_worker, venv_python  # noqa: E402
from benchmarks.bench_latency import (  # noqa: E402
    distance,
    model_runner,
    service_options,
    write_keeping_findings,
)

RESULTS: Final = ROOT / "benchmarks" / "results" / "openvino.md"
VENV: Final = ROOT / "benchmarks" / ".venv-openvino"
WORKER: Final = ROOT / "benchmarks" / "openvino_worker.py"
OPENVINO_REQUIREMENTS: Final = ("onnxruntime-openvino==1.24.1", "numpy>=2,<3")
MARK: Final = "@@OV "
BATCHES: Final = (1, 8)
SEED: Final = 0
MIN_RUNS: Final = 3
SETTLE_S: Final = 0.25  # after each block: the engine's idle threads stop spinning
GRAPHGATE, OPENVINO, ITS_CPU = "graphgate", "OpenVINO", "its CPU"
PROVIDERS: Final = {GRAPHGATE: "cpu", OPENVINO: "openvino", ITS_CPU: "cpu"}

Runner = Callable[[dict[str, np.ndarray]], list[np.ndarray]]


def openvino_python(install: bool) -> Path:
    """benchmarks/.venv-openvino with OPENVINO_REQUIREMENTS, made or updated when needed (as
    it is, without `install`)."""
    if install:
        return venv_python(VENV, OPENVINO_REQUIREMENTS)
    python = VENV / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"{VENV.relative_to(ROOT)} is missing: run without --no-install")
    return python


class Worker:
    """benchmarks/openvino_worker.py: one session of one ONNX file, in the OpenVINO build or
    (with graphgate's Python) in graphgate's onnxruntime."""

    def __init__(
        self, python: Path, onnx_path: Path, provider: str, settings: list[str], log: Path
    ) -> None:
        self._log = log
        with log.open("wb") as stderr:
            self._proc = subprocess.Popen(
                [str(python), str(WORKER), str(onnx_path), "--provider", provider, *settings],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True,
            )  # fmt: skip
        self.hello = self._answer()

    def _answer(self) -> dict[str, Any]:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            if line.startswith(MARK):
                found: dict[str, Any] = json.loads(line.removeprefix(MARK))
                return found
        code = self._proc.wait()
        tail = [ln for ln in self._log.read_text(errors="replace").splitlines() if ln]
        return {"error": f"worker died (exit {code}): {' | '.join(tail[-2:])[:400]}"}

    def ask(self, command: str, body: dict[str, Any]) -> dict[str, Any]:
        assert self._proc.stdin is not None
        if self._proc.poll() is not None:
            return {"error": f"worker exited with {self._proc.returncode}"}
        self._proc.stdin.write(f"{command} {json.dumps(body)}\n")
        self._proc.stdin.flush()
        return self._answer()

    def runner(self, scratch: Path) -> Runner:
        """The worker's fetches for some feeds, in order (an exception where it fails)."""

        def run(feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
            np.savez(scratch / "feeds.npz", **feeds)
            got = self.ask(
                "answer", {"feeds": str(scratch / "feeds.npz"), "out": str(scratch / "out.npz")}
            )
            if "error" in got:
                raise RuntimeError(got["error"])
            stored = np.load(scratch / "out.npz")
            return [stored[f"arr_{i}"] for i in range(got["outputs"])]

        return run

    def close(self) -> None:
        end_worker(self._proc)


@dataclass
class Row:
    name: str
    ms: dict[str, dict[str, float]] = field(default_factory=dict)  # batch -> engine -> median
    # batch -> engine -> [median, low, high] of the rounds' engine / graphgate ratios
    ratios: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    worst: dict[str, Any] = field(default_factory=dict)  # batch -> OpenVINO vs graphgate
    verdicts: dict[str, str] = field(default_factory=dict)  # engine -> the corpus verdict
    notes: list[str] = field(default_factory=list)


def reason(message: str) -> str:
    """onnxruntime's refusal without the C++ signatures it prints before the reason."""
    if "[OpenVINO-EP]" in message:
        message = message[message.index("[OpenVINO-EP]") :]
    elif "&) " in message:
        message = message[message.rindex("&) ") + 3 :]
    return message[:300]


def timed_rounds(
    engines: dict[str, Callable[[float], list[float]]], rounds: int, seconds: float
) -> tuple[dict[str, float], dict[str, list[float]]]:
    """Each engine's median ms over all rounds, and its [median, low, high] of per-round
    ratios to graphgate's block."""
    order = np.random.default_rng(SEED)
    times: dict[str, list[float]] = {name: [] for name in engines}
    per_round: dict[str, list[float]] = {name: [] for name in engines if name != GRAPHGATE}
    for _ in range(rounds):
        medians = {}
        for name in order.permutation(list(engines)):
            got = engines[name](seconds)
            times[name] += got
            medians[name] = statistics.median(got)
            time.sleep(SETTLE_S)
        for name in per_round:
            per_round[name].append(medians[name] / medians[GRAPHGATE])
    ms = {name: statistics.median(values) for name, values in times.items()}
    ratios = {
        name: [statistics.median(values), min(values), max(values)]
        for name, values in per_round.items()
    }
    return ms, ratios


def session_settings(threads: int) -> list[str]:
    """The worker's arguments for the service's CPU session settings (bench_latency's)."""
    from executor.session import spinning_config

    options = service_options(threads)
    return [
        "--threads", str(options.intra_op_threads),
        "--inter-threads", str(options.inter_op_threads),
        *(f"--config={key}={value}" for key, value in spinning_config(options).items()),
    ]  # fmt: skip


def worker_timer(worker: Worker, feeds_path: Path) -> Callable[[float], list[float]]:
    def run(seconds: float) -> list[float]:
        got = worker.ask(
            "time", {"feeds": str(feeds_path), "seconds": seconds, "min_runs": MIN_RUNS}
        )
        if "error" in got:
            raise RuntimeError(got["error"])
        times: list[float] = got["ms"]
        return times

    return run


def measure(row: Row, where: Path, python: Path, args: argparse.Namespace, scratch: Path) -> None:
    from executor import compile
    from tests.corpus import compare, zoo
    from validator import ValidationFailed, validate

    files = compare.Files.read(where)
    try:
        model = compile(validate(files.program, files.params), service_options(args.threads))
    except ValidationFailed as failed:
        row.notes.append(f"graphgate rejects it: {', '.join(dict.fromkeys(failed.codes))}")
        return
    onnx_path = scratch / "model.onnx"
    onnx_path.write_bytes(model.onnx_bytes)
    ours = model_runner(model)
    settings = session_settings(args.threads)
    workers: dict[str, Worker] = {}
    try:
        for engine, provider in PROVIDERS.items():
            interpreter = Path(sys.executable) if engine == GRAPHGATE else python
            log = scratch / f"{len(workers)}.log"
            worker = Worker(interpreter, onnx_path, provider, settings, log)
            if "error" in worker.hello:
                row.notes.append(f"{engine}: no session: {reason(worker.hello['error'])}")
                worker.close()
            else:
                workers[engine] = worker
        if GRAPHGATE not in workers:
            return
        openvino = workers[OPENVINO].runner(scratch) if OPENVINO in workers else None
        if openvino is not None:
            judged = row.name in compare.FLOAT64_JUDGED
            for engine, run in ((GRAPHGATE, ours), (OPENVINO, openvino)):
                try:
                    row.verdicts[engine] = compare.outputs_verdict(
                        row.name, run, files, judged
                    ).status
                except RuntimeError as e:
                    row.verdicts[engine] = "ERROR"
                    row.notes.append(f"{engine}: {str(e)[:300]}")
        for batch in BATCHES:
            feeds = compare.feeds(zoo.ENTRIES[row.name], batch, SEED)
            feeds_path = scratch / f"b{batch}.npz"
            np.savez(feeds_path, **feeds)
            if openvino is not None and row.verdicts.get(OPENVINO) != "ERROR":
                row.worst[str(batch)] = distance(openvino(feeds), ours(feeds))
            engines = {name: worker_timer(w, feeds_path) for name, w in workers.items()}
            try:
                ms, ratios = timed_rounds(engines, args.rounds, args.block_s)
            except RuntimeError as e:
                row.notes.append(f"batch {batch}: {str(e)[:300]}")
                continue
            row.ms[str(batch)], row.ratios[str(batch)] = ms, ratios
    finally:
        for worker in workers.values():
            worker.close()


# -- the table ---------------------------------------------------------------------------------


def ms_cell(row: Row, batch: int, engine: str) -> str:
    value = row.ms.get(str(batch), {}).get(engine)
    return "-" if value is None else f"{value:.2f}"


def ratio_cell(row: Row, batch: int, engine: str) -> str:
    found = row.ratios.get(str(batch), {}).get(engine)
    if found is None:
        return "-"
    median, low, high = found
    text = f"{median:.2f}"
    return (f"**{text}**" if median > 1.05 else text) + f" ({low:.2f}-{high:.2f})"


def worst_cell(row: Row) -> str:
    values = list(row.worst.values())
    if not values:
        return "-"
    if any(isinstance(v, str) for v in values):
        return next(v for v in values if isinstance(v, str))
    return f"{max(values):.2g}"


def table(rows: list[Row]) -> list[str]:
    lines = [
        "| model | graphgate ms b1 | b8 | OpenVINO ms b1 | b8 | OpenVINO / graphgate b1 | b8 "
        "| its CPU / graphgate b1 | b8 | OpenVINO vs graphgate worst | corpus verdict: "
        "graphgate, OpenVINO |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        cells = [
            row.name,
            *(ms_cell(row, b, GRAPHGATE) for b in BATCHES),
            *(ms_cell(row, b, OPENVINO) for b in BATCHES),
            *(ratio_cell(row, b, OPENVINO) for b in BATCHES),
            *(ratio_cell(row, b, ITS_CPU) for b in BATCHES),
            worst_cell(row),
            ", ".join(row.verdicts.get(e, "-") for e in (GRAPHGATE, OPENVINO)),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def summary(rows: list[Row]) -> list[str]:
    lines = []
    for engine in (OPENVINO, ITS_CPU):
        for batch in BATCHES:
            found = {
                row.name: r[0]
                for row in rows
                if (r := row.ratios.get(str(batch), {}).get(engine)) is not None
            }
            if not found:
                continue
            faster = sorted(name for name, r in found.items() if r < 0.95)
            slower = sorted(name for name, r in found.items() if r > 1.05)
            lines.append(
                f"- {engine} / graphgate, batch {batch}: median "
                f"{statistics.median(found.values()):.2f} over {len(found)} models; faster than "
                f"0.95x on {len(faster)}"
                + (f" ({', '.join(faster)})" if faster else "")
                + f"; slower than 1.05x on {len(slower)}"
                + (f" ({', '.join(slower)})" if slower else "")
            )
    refused = [
        row.name for row in rows if any(n.startswith(f"{OPENVINO}: no session") for n in row.notes)
    ]
    failed = [row.name for row in rows if row.verdicts.get(OPENVINO) not in (None, "PASS")]
    lines.append(
        f"- no OpenVINO session: {len(refused)}" + (f" ({', '.join(refused)})" if refused else "")
    )
    lines.append(
        f"- OpenVINO's answers outside the corpus tolerance: {len(failed)}"
        + (f" ({', '.join(failed)})" if failed else "")
    )
    return lines


def write(out: Path, rows: list[Row], context: dict[str, str]) -> None:
    notes = [f"- {row.name}: {note}" for row in rows for note in row.notes]
    lines = [
        "# The corpus on onnxruntime's OpenVINO execution provider",
        "",
        f"Command: `{context['command']}` ({len(rows)} of {context['count']} models; "
        f"{context['when']}). Machine: {context['machine']}. {context['versions']}.",
        "",
        "Median milliseconds per run at batch 1 and 8 on the corpus' own feeds, "
        f"{context['threads']} threads each, graphgate's ONNX in all three engines, each session "
        "run bare (session.run, no request checks), each in a process of its own: graphgate "
        "(the service's CPU session settings); OpenVINO (onnxruntime-openvino's execution "
        "provider, FP32, the nodes it does not take on that build's CPU provider); "
        "its CPU (the OpenVINO build's CPU provider alone: the onnxruntime version's share). "
        "Each engine runs alone, in blocks, in a random order each round; ratios are "
        "engine / graphgate, the median of the rounds' ratios with their range; **bold** is "
        'more than 1.05x (slower than graphgate). "worst": max |OpenVINO - graphgate| / '
        "(1e-5 + 1e-4 |graphgate|) over both batches. The verdicts are the corpus' own, against "
        "Paddle's Executor (tests/corpus/compare.py).",
        "",
        *table(rows),
        "",
        "## Summary",
        "",
        *summary(rows),
        "",
        "## Notes",
        "",
        *(notes or ["- none"]),
        "",
    ]
    write_keeping_findings(out, lines)


def versions(python: Path) -> str:
    import onnxruntime as ort

    theirs = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('onnxruntime-openvino'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    return f"graphgate's onnxruntime {ort.__version__}; onnxruntime-openvino {theirs}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("names", nargs="*")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--block-s", type=float, default=0.5, help="seconds per timed block")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-install", action="store_true", help="use the venv as it is")
    args = parser.parse_args()

    from tests.corpus import compare, zoo

    python = openvino_python(install=not args.no_install)
    names = args.names or list(zoo.ENTRIES)
    context = {
        "command": "PYTHONPATH=. python benchmarks/bench_openvino.py"
        + (f" --rounds {args.rounds}" if args.rounds != 4 else "")
        + (f" --block-s {args.block_s:g}" if args.block_s != 0.5 else "")
        + (" " + " ".join(args.names) if args.names else ""),
        "count": str(len(names)),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "threads": str(args.threads),
        "machine": f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start",
        "versions": versions(python),
    }
    out, rows = Path(args.out), []
    for name in names:
        row = Row(name)
        rows.append(row)
        where = compare.exported([name])[name]
        if isinstance(where, str):
            row.notes.append(f"Paddle export failed: {where.strip().splitlines()[-1][:200]}")
            continue
        with tempfile.TemporaryDirectory() as scratch:
            measure(row, where, python, args, Path(scratch))
        print(f"{name}: {json.dumps(row.ratios)} {row.verdicts} {row.notes}", flush=True)
        write(out, rows, context)
    context["machine"] += f", {os.getloadavg()[0]:.1f} at the end"
    write(out, rows, context)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
