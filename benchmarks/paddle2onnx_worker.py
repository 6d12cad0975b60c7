"""Paddle2ONNX side of bench_executor.py; runs inside benchmarks/.venv-paddle2onnx, never in ours.

Usage (by bench_executor.py): <venv python> paddle2onnx_worker.py PROGRAM PARAMS OUT_ONNX --opset N --log FILE

Imports paddle2onnx once (timed apart, and excluded from the figures), answers with a line
`@@P2O {json}`, then for every `run` line on stdin (`run {"program": P, "params": Q, "out": O}`:
another model, as bench_corpus.py converts the whole corpus in one worker) converts the files the way its command line
does (`paddle2onnx --model_dir ... --save_file ...`: onnx.checker, Polygraphy constant folding), at
graphgate's opset, opens the result in an onnxruntime CPU session, and answers with its times (or
the failure message) on another `@@P2O` line; the parent interleaves these runs with graphgate's.
Everything Paddle and Paddle2ONNX print (C++ included) goes to the log, read back on failure
(by the parent too, when the process dies).
Imports nothing of graphgate.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_ERROR_LINE = re.compile(r"error|failed|not supported|oops|exception|abort", re.IGNORECASE)


@contextmanager
def captured_output(log: Path) -> Iterator[None]:
    """Redirects file descriptors 1 and 2 (Python and C++ output alike) into `log`."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with log.open("ab") as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def failure_message(exc: BaseException | None, log: Path) -> str:
    """Paddle2ONNX's own error lines (export() logs and swallows the real error), else the exception."""
    text = log.read_text(errors="replace") if log.exists() else ""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    lines = [ln.strip() for ln in text.splitlines() if _ERROR_LINE.search(ln)]
    lines = [ln for ln in lines if "Fail to fold" not in ln and "deprecated" not in ln]
    found = "; ".join(dict.fromkeys(lines))[:600]
    if exc is not None:
        found = f"{found}; {type(exc).__name__}: {exc}" if found else f"{type(exc).__name__}: {exc}"
    return found or "no ONNX file was written"


def answer(message: dict[str, Any]) -> None:
    print("@@P2O " + json.dumps(message), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("program")
    parser.add_argument("params")
    parser.add_argument("out")
    parser.add_argument("--opset", type=int, required=True, help="graphgate's opset")
    parser.add_argument("--log", required=True, help="where Paddle's and Paddle2ONNX's output goes")
    args = parser.parse_args()

    start = time.perf_counter()
    import onnxruntime as ort
    import paddle2onnx  # type: ignore[import-not-found]

    import_s = time.perf_counter() - start
    import onnx

    options = ort.SessionOptions()  # as graphgate's compile(): default intra-op, 1 inter-op thread
    options.intra_op_num_threads = 0
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    out = Path(args.out)
    log = Path(args.log)

    def once(program: str, params: str, out: Path) -> dict[str, Any]:
        out.unlink(missing_ok=True)
        log.unlink(missing_ok=True)
        error: BaseException | None = None
        t0 = time.perf_counter()
        with captured_output(log):
            try:
                paddle2onnx.export(
                    program,
                    params,
                    save_file=str(out),
                    opset_version=args.opset,
                    auto_upgrade_opset=True,
                    enable_onnx_checker=True,
                    optimize_tool="polygraphy",  # the command line's default
                )
            except Exception as e:  # export() swallows the real error and fails later
                error = e
        t1 = time.perf_counter()
        if error is not None or not out.exists():
            return {"error": "conversion failed: " + failure_message(error, log)}
        try:
            ort.InferenceSession(str(out), options, providers=["CPUExecutionProvider"])
        except Exception as e:
            return {"error": f"onnxruntime session failed: {str(e).splitlines()[0][:400]}"}
        t2 = time.perf_counter()
        return {"total_s": t2 - t0, "convert_s": t1 - t0, "session_s": t2 - t1}

    answer(
        {
            "import_s": import_s,
            "versions": {
                "paddle2onnx": paddle2onnx.__version__,
                "paddlepaddle": importlib.metadata.version("paddlepaddle"),
                "onnxruntime": ort.__version__,
                "onnx": onnx.__version__,
            },
        }
    )
    for line in sys.stdin:
        command, _, paths = line.strip().partition(" ")
        if command != "run":
            break
        if paths:  # `run {"program": ..., "params": ..., "out": ...}`: another model
            files = json.loads(paths)
            answer(once(files["program"], files["params"], Path(files["out"])))
        else:
            answer(once(args.program, args.params, out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
