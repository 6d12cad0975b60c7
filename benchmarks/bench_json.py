"""JSON tensors against binary tensors: the V2 codec in this process, and a real `graphgate serve`.

Usage: python benchmarks/bench_json.py [--runs N] [--served-runs N] [--before-source DIR]

In this process (no HTTP, no model): decode of a request with x FP32[1, 3, 224, 224] and encode
of a response with y FP32[1, 3, 224, 224], as binary tensors; as JSON through the codec as it
is (large JSON tensors read apart, server/v2/json_tensors.py; data written by orjson); and as
JSON the way the codec read and wrote it before: its reference reading
(`decode_request(cut_tensors=False)`, still the reading of every request the faster one does not
take) and each output's data written through Python floats by json.dumps (re-created here,
`encode_as_before`). The request JSON is what tritonclient and json.dumps write (flat data, ", "
between numbers, 17 significant digits). The steps take turns in every round; medians.

End to end: `graphgate serve` from this checkout, and with --before-source a second one from
another source tree (e.g. the commit before: `git archive COMMIT | tar -x -C DIR`), both
running at once, with two no-compute models: `transport` (mean of x: only the request is big)
and `echo` (assign x to y: the request and the response are big). One client per server on a
keep-alive connection (http.client); binary and JSON requests take turns in blocks; the client
decodes answers with orjson for both servers alike. p50s, and JSON/binary within each server.

Writes benchmarks/results/json_tensors.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FINDINGS = "## Findings"
RESULTS = ROOT / "benchmarks" / "results" / "json_tensors.md"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import httpx2  # noqa: E402
import numpy as np  # noqa: E402
import orjson  # noqa: E402
from bench_serving import (  # noqa: E402
    HEADER_LENGTH,
    Connection,
    serve,
    tenant_key,
    timed,
    transport_model,
)

from graph_proto.types import DType  # noqa: E402
from server.cli.user import encode_infer_request  # noqa: E402
from server.dispatch.answer import AnswerSpec, Budget, BufferSink, OutputSpec, encode  # noqa: E402
from server.v2 import codec  # noqa: E402
from server.v2.codec import RequestedOutput  # noqa: E402
from tests.support.builders import GraphBuilder, V  # noqa: E402
from validator import TensorSpec  # noqa: E402

SHAPE = (1, 3, 224, 224)
PARSER = "orjson.loads of the JSON request alone"
X = TensorSpec("x", DType.FP32, (-1, 3, 224, 224))
Y = TensorSpec("y", DType.FP32, (-1, 3, 224, 224))
Step = Callable[[], object]


def image() -> np.ndarray:
    return np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)


def json_body(x: np.ndarray) -> bytes:
    """A V2 JSON request as tritonclient and json.dumps write it: flat data, Python floats."""
    entry = {"name": "x", "shape": list(x.shape), "datatype": "FP32", "data": x.ravel().tolist()}
    return json.dumps({"inputs": [entry]}).encode()


# -- in this process -----------------------------------------------------------------------


def encode_as_before(results: list[tuple[RequestedOutput, np.ndarray]]) -> bytes:
    """The codec's JSON response before: each output's data as Python numbers, one by one,
    written with the document by json.dumps."""
    entries = [
        {
            "name": out.spec.name,
            "datatype": codec.DATATYPES[out.spec.dtype],
            "shape": list(value.shape),
            "data": value.reshape(-1).tolist(),
        }
        for out, value in results
    ]
    doc = {"model_name": "m", "model_version": "1", "outputs": entries}
    return json.dumps(doc, separators=(",", ":")).encode()


def encoded(x: np.ndarray, *, binary: bool) -> bytes:
    """x as the worker writes an answer (server/dispatch/answer.py)."""
    spec = AnswerSpec("m", "1", None, (OutputSpec("y", "FP32", "<f4", binary),), Budget())
    sink = BufferSink()
    encode(spec, {"y": x}, sink, lambda: None)
    return bytes(sink.buffer)


def codec_steps(x: np.ndarray) -> dict[str, Step]:
    as_json = json_body(x)
    as_binary, headers = encode_infer_request({"x": x})
    length = headers[HEADER_LENGTH]
    json_out = [(RequestedOutput(Y, False), x)]

    return {
        "decode binary": lambda: codec.decode_request(as_binary, length, [X], [Y]),
        "decode JSON": lambda: codec.decode_request(as_json, None, [X], [Y]),
        "decode JSON before": lambda: codec.decode_request(
            as_json, None, [X], [Y], cut_tensors=False
        ),
        PARSER: lambda: orjson.loads(as_json),
        "encode binary": lambda: encoded(x, binary=True),
        "encode JSON": lambda: encoded(x, binary=False),
        "encode JSON before": lambda: encode_as_before(json_out),
    }


def in_process(runs: int) -> dict[str, float]:
    """Median ms of each step, the steps taking turns in every round (after one warm-up)."""
    steps = codec_steps(image())
    times: dict[str, list[float]] = {name: [] for name in steps}
    for step in steps.values():
        step()
    for _ in range(runs):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}


# -- end to end ----------------------------------------------------------------------------


def echo_model() -> GraphBuilder:
    """y = assign(x) over x FP32[-1, 3, 224, 224]: the response is as big as the request."""
    g = GraphBuilder()
    g.feed("x", DType.FP32, [-1, 3, 224, 224])
    g.node("assign", {"X": ["x"]}, {"Out": [V("y", [-1, 3, 224, 224], DType.FP32)]})
    g.fetch("y")
    return g


MODELS = {"transport": transport_model, "echo": echo_model}


def upload(url: str, key: str) -> None:
    with httpx2.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}) as client:
        for name, build in MODELS.items():
            built = build().built()
            files = {"program": built.program} | ({"params": built.params} if built.params else {})
            made = client.post("/v1/models", data={"name": name}, files=files, timeout=600)
            if made.status_code != 201:
                raise SystemExit(f"upload of {name} failed: {made.text[:500]}")


def served_steps(conn: Connection, model: str, x: np.ndarray) -> dict[str, Step]:
    path = f"/v2/models/{model}/infer"
    binary_body, binary_headers = encode_infer_request({"x": x})
    as_json = json_body(x)

    def binary() -> None:
        status, head, content = conn.request("POST", path, binary_body, binary_headers)
        if status != 200:
            raise SystemExit(f"{model} binary: {status} {content[:300]!r}")
        length = int(head[HEADER_LENGTH])
        orjson.loads(content[:length])
        np.frombuffer(content, np.float32, offset=length)

    def json_request() -> None:
        status, _, content = conn.request("POST", path, as_json, {"Content-Type": JSON})
        if status != 200:
            raise SystemExit(f"{model} JSON: {status} {content[:300]!r}")
        for out in orjson.loads(content)["outputs"]:
            np.asarray(out["data"], np.float32)

    return {"binary": binary, "JSON": json_request}


JSON = "application/json"


def end_to_end(runs: int, before: Path | None) -> dict[str, dict[str, float]]:
    """p50 ms per (server, model) and request kind, everything interleaved in blocks."""
    x = image()
    # REST only: two servers (and other work's) would otherwise race for gRPC's port 8001.
    os.environ["GRAPHGATE_GRPC_PORT"] = "0"
    servers = {"now": ROOT} | ({"before": before} if before is not None else {})
    with ExitStack() as stack:
        steps: dict[str, Step] = {}
        for server, source in servers.items():
            data = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "data"
            url = stack.enter_context(serve(data, source))
            key = tenant_key(url)
            upload(url, key)
            conn = Connection(url, {"Authorization": f"Bearer {key}"})
            stack.callback(conn.close)
            for model in MODELS:
                for kind, step in served_steps(conn, model, x).items():
                    steps[f"{server}|{model}|{kind}"] = step
        print(f"end to end: {len(steps)} request kinds, {runs} runs each", flush=True)
        times = timed(steps, runs, max(5, runs // 10))
    p50s: dict[str, dict[str, float]] = {}
    for name, t in times.items():
        server, model, kind = name.split("|")
        p50s.setdefault(f"{server}|{model}", {})[kind] = float(np.percentile(t, 50)) * 1e3
    return p50s


# -- report --------------------------------------------------------------------------------


def report(args: argparse.Namespace, codec_ms: dict[str, float], served: dict[str, Any]) -> str:
    def ratio(before: bool = False) -> float:
        suffix = " before" if before else ""
        json_ms = codec_ms[f"decode JSON{suffix}"] + codec_ms[f"encode JSON{suffix}"]
        return json_ms / (codec_ms["decode binary"] + codec_ms["encode binary"])

    load = os.getloadavg()
    lines = [
        "# JSON tensors against binary tensors",
        "",
        f"Command: `python benchmarks/bench_json.py --runs {args.runs} --served-runs "
        f"{args.served_runs}"
        + (" --before-source DIR`" if args.before_source else "`")
        + (f" (DIR: {args.before_label})" if args.before_source else "")
        + f". Machine: {os.cpu_count()} CPUs, load average {args.load_before:.1f} before and "
        f"{load[0]:.1f} after (other work shares it: compare ratios within a run, not figures "
        "across runs).",
        "",
        "## The codec in this process (x and y FP32[1, 3, 224, 224]; median ms)",
        "",
        "| step | binary | JSON | JSON before | JSON / binary | JSON before / binary |",
        "|---|---|---|---|---|---|",
    ]
    for step in ("decode", "encode"):
        b, j, old = (codec_ms[f"{step} {k}"] for k in ("binary", "JSON", "JSON before"))
        lines.append(f"| {step} | {b:.3f} | {j:.2f} | {old:.2f} | {j / b:.0f}x | {old / b:.0f}x |")
    lines += [
        f"| decode + encode | | | | {ratio():.0f}x | {ratio(True):.0f}x |",
        "",
        f"The parser's floor: {PARSER} takes {codec_ms[PARSER]:.2f} ms; the JSON decode takes "
        f"{codec_ms['decode JSON'] / codec_ms[PARSER]:.2f}x that (before: "
        f"{codec_ms['decode JSON before'] / codec_ms[PARSER]:.2f}x).",
        "",
        "## End to end: `graphgate serve`, one client (p50 ms)",
        "",
        "| server | model | binary | JSON | JSON / binary |",
        "|---|---|---|---|---|",
    ]
    for name, kinds in served.items():
        server, model = name.split("|")
        lines.append(
            f"| {server} | {model} | {kinds['binary']:.2f} | {kinds['JSON']:.2f} | "
            f"{kinds['JSON'] / kinds['binary']:.1f}x |"
        )
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=40, help="rounds in this process")
    parser.add_argument("--served-runs", type=int, default=60, help="timed requests per kind")
    parser.add_argument("--before-source", type=Path, help="a source tree to serve as 'before'")
    parser.add_argument("--before-label", default="", help="what --before-source is, for the note")
    args = parser.parse_args()
    args.load_before = os.getloadavg()[0]
    codec_ms = in_process(args.runs)
    print(codec_ms, flush=True)
    served = end_to_end(args.served_runs, args.before_source)
    print(served, flush=True)
    text = report(args, codec_ms, served)
    # The findings below the tables are written by hand: a new run keeps them.
    kept = RESULTS.read_text().partition(FINDINGS)[2] if RESULTS.exists() else ""
    RESULTS.write_text(text + (f"\n{FINDINGS}{kept}" if kept else ""))
    print(text)


if __name__ == "__main__":
    main()
