"""One engine of bench_openvino.py: benchmarks/.venv-openvino's Python runs it, or graphgate's.

Usage (by bench_openvino.py): <python> openvino_worker.py ONNX --provider openvino|cpu
       --threads N --inter-threads M [--config KEY=VALUE ...]

onnxruntime-openvino is a build of onnxruntime of its own (it ships the same `onnxruntime` import
package as onnxruntime-gpu, so the two cannot share an environment): this worker, run with
benchmarks/.venv-openvino's Python, opens one session of graphgate's ONNX file in it, with
OpenVINO's execution provider (FP32, N threads; the nodes it does not take run on that build's
CPU provider) or with that build's CPU provider alone; run with graphgate's Python, it is
graphgate's CPU session, timed the same way. The session gets graphgate's session settings
(thread counts and config entries, given by the parent). It answers on `@@OV {json}` lines:
first how the session was built (or why it was not), then one answer per command line on stdin:
  time {"feeds": NPZ, "seconds": S, "min_runs": K}  -> {"ms": [...]}: runs timed for S seconds
  answer {"feeds": NPZ, "out": NPZ}                 -> {"outputs": n}: the fetches, in order
Imports nothing of graphgate.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np
import onnxruntime as ort

WARM_RUNS = 2


def answer(message: dict[str, Any]) -> None:
    print("@@OV " + json.dumps(message), flush=True)


def session(args: argparse.Namespace) -> ort.InferenceSession:
    onnx, provider, threads = args.onnx, args.provider, args.threads
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = args.inter_threads
    for entry in args.config:
        key, _, value = entry.partition("=")
        options.add_session_config_entry(key, value)
    options.log_severity_level = 3
    if provider == "cpu":
        return ort.InferenceSession(onnx, options, providers=["CPUExecutionProvider"])
    # FP32: OpenVINO's CPU plugin may otherwise compute in bf16 where the CPU has it.
    openvino = {"device_type": "CPU", "precision": "FP32", "num_of_threads": str(threads)}
    return ort.InferenceSession(
        onnx, options, providers=[("OpenVINOExecutionProvider", openvino), "CPUExecutionProvider"]
    )


def feeds_of(s: ort.InferenceSession, path: str) -> dict[str, np.ndarray]:
    stored = np.load(path)
    return {i.name: stored[i.name] for i in s.get_inputs()}


def timed(s: ort.InferenceSession, request: dict[str, Any]) -> dict[str, Any]:
    feeds = feeds_of(s, request["feeds"])
    for _ in range(WARM_RUNS):
        s.run(None, feeds)
    times: list[float] = []
    until = time.perf_counter() + request["seconds"]
    while len(times) < request["min_runs"] or time.perf_counter() < until:
        start = time.perf_counter()
        s.run(None, feeds)
        times.append((time.perf_counter() - start) * 1e3)
    return {"ms": times}


def answered(s: ort.InferenceSession, request: dict[str, Any]) -> dict[str, Any]:
    outputs = s.run(None, feeds_of(s, request["feeds"]))
    np.savez(request["out"], *outputs)
    return {"outputs": len(outputs)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("onnx")
    parser.add_argument("--provider", choices=("openvino", "cpu"), required=True)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--inter-threads", type=int, required=True)
    parser.add_argument("--config", action="append", default=[], help="KEY=VALUE")
    args = parser.parse_args()
    start = time.perf_counter()
    try:
        s = session(args)
    except Exception as e:  # onnxruntime's own refusal: the row says why
        answer({"error": " ".join(str(e).split())[:4000]})
        return 0
    answer(
        {
            "build_s": time.perf_counter() - start,
            "providers": s.get_providers(),
            "onnxruntime": ort.__version__,
        }
    )
    commands = {"time": timed, "answer": answered}
    for line in sys.stdin:
        command, _, body = line.strip().partition(" ")
        if command not in commands:
            break
        try:
            answer(commands[command](s, json.loads(body)))
        except Exception as e:
            answer({"error": f"{type(e).__name__}: {str(e).splitlines()[0][:400]}"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
