"""The hostile inference cases tests/server/test_hostile_answers.py checks and
benchmarks/bench_hostile.py measures: programs whose answers are huge or sized by data, and the
requests and readings both use."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from graph_proto.types import DType
from tests.support.builders import CONV2D_ATTRS, Built, GraphBuilder, V, weights
from tests.support.served import Server
from tests.support.uploads import post_model

FP32 = DType.FP32

MIB = 1024 * 1024
# What the server process may keep after a case: its own allocator's slack and caches, never
# the answer (the smallest answer streamed here is 64 MiB, the largest 256 MiB).
RSS_BOUND = 64 * MIB
OUTPUTS = 64


def scale_outputs() -> Built:
    """64 outputs y_i = scale(x, i) over x[-1, 1024]: 64 answers' worth from one input."""
    g = GraphBuilder()
    x = g.feed("x", FP32, [-1, 1024])
    for i in range(OUTPUTS):
        attrs = {"scale": float(i + 1), "bias": 0.0, "bias_after_scale": True}
        g.node("scale", {"X": [x]}, {"Out": [V(f"y{i}", [-1, 1024])]}, attrs)
        g.fetch(f"y{i}")
    return g.built()


def shape_driven_expand() -> Built:
    """big = expand_v2(x, s): x[1, 1] and its target shape s[2] from the request."""
    g = GraphBuilder()
    x = g.feed("x", FP32, [1, 1])
    s = g.feed("s", DType.INT32, [2])
    g.node("expand_v2", {"X": [x], "Shape": [s]}, {"Out": [V("big", [-1, -1])]}, {"shape": []})
    g.fetch("big")
    return g.built()


def large_conv() -> Built:
    """A 3x3 conv of 8 filters over an image of any size: x[1, 3, H, W] -> [1, 8, H, W]."""
    g = GraphBuilder()
    x = g.feed("image", FP32, [1, 3, -1, -1])
    w = g.param("conv.w", weights(8, 3, 3, 3))
    g.node("conv2d", {"Input": [x], "Filter": [w]}, {"Output": [V("conv", [1, 8, -1, -1])]}, CONV2D_ATTRS)  # fmt: skip
    g.fetch("conv")
    return g.built()


def relu() -> Built:
    """y = relu(x) over x[-1, 8]: proven batchable, so it batches by default."""
    g = GraphBuilder()
    x = g.feed("x", FP32, [-1, 8])
    g.node("relu", {"X": [x]}, {"Out": [V("y", [-1, 8])]}, {})
    g.fetch("y")
    return g.built()


def upload(server: Server, key: str, name: str, built: Built) -> None:
    """`built` stored as model `name` of the key's tenant (201, or the test fails)."""
    answer = post_model(server, key, name, built)
    assert answer.status_code == 201, answer.text


def binary_request(
    inputs: dict[str, np.ndarray], *, binary_outputs: bool, extra: dict[str, Any] | None = None
) -> tuple[bytes, dict[str, str]]:
    """A V2 request with binary inputs; every output binary or all JSON."""
    specs = []
    for name, value in inputs.items():
        datatype = {"float32": "FP32", "int32": "INT32"}[value.dtype.name]
        specs.append(
            {
                "name": name,
                "shape": list(value.shape),
                "datatype": datatype,
                "parameters": {"binary_data_size": value.nbytes},
            }
        )
    doc: dict[str, Any] = {"inputs": specs, "parameters": {"binary_data_output": binary_outputs}}
    doc["parameters"].update(extra or {})
    header = json.dumps(doc).encode()
    body = header + b"".join(v.tobytes() for v in inputs.values())
    return body, {"Inference-Header-Content-Length": str(len(header))}


def rss_bytes(server: Server) -> int:
    assert server.process is not None
    status = Path(f"/proc/{server.process.pid}/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024
