"""Lowerings that onnxruntime's graph optimizations must recognise: a pattern spelled so that its
fusion does not match runs as separate kernels (exact gelu: five element-wise passes instead of
one; benchmarks/results/latency.md)."""

from __future__ import annotations

import os
import tempfile
from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest

# Imported first: paddle_util switches Paddle to legacy programs before importing it.
pytest.importorskip("tests.conformance.paddle_util")

from executor.convert import lower
from executor.session import SessionOptions, ort_session_options
from tests.conformance.families.activation import legacy
from tests.conformance.paddle_util import Saved, assert_parity, building, paddle, save
from validator import validate

pytestmark = pytest.mark.paddle


def _gelu(dtype: str) -> Saved:
    with building() as (main, startup):
        x = paddle.static.data("x", [-1, 4, 16], dtype)
        out = legacy("gelu", {"X": [x]}, {"approximate": False})
    return save(main, startup, [x], [out])


def _runs(saved: Saved) -> Counter[str]:
    """The op types of the graph onnxruntime runs (after its optimizations) on CPU."""
    model = lower(validate(saved.program, saved.params)).model
    options = ort_session_options(SessionOptions(use_cuda=False))
    with tempfile.TemporaryDirectory() as tmp:
        options.optimized_model_filepath = os.path.join(tmp, "optimized.onnx")
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        return Counter(
            node.op_type for node in onnx.load(options.optimized_model_filepath).graph.node
        )


def test_exact_float32_gelu_runs_as_one_fused_gelu_and_matches_paddle() -> None:
    saved = _gelu("float32")
    runs = _runs(saved)
    assert runs["Gelu"] == 1
    assert not runs.keys() & {"Erf", "Mul", "Div", "Add"}
    x = np.random.default_rng(0).standard_normal((3, 4, 16)).astype(np.float32) * 4
    assert_parity(saved, {"x": x})


def test_approximate_float32_gelu_runs_as_one_fast_gelu_and_matches_paddle() -> None:
    """GPT's tanh gelu: onnxruntime's FastGelu fusion wants x^3 as Pow(x, 3). (Followed by a
    relu, as a gelu is by a matmul in a model: the fusion leaves a graph output alone.)"""
    with building() as (main, startup):
        x = paddle.static.data("x", [-1, 4, 16], "float32")
        gelu = legacy("gelu", {"X": [x]}, {"approximate": True})
        out = legacy("relu", {"X": [gelu]}, {})
    saved = save(main, startup, [x], [out])
    runs = _runs(saved)
    assert runs["FastGelu"] == 1
    assert not runs.keys() & {"Tanh", "Pow", "Mul", "Add"}
    x = np.random.default_rng(1).standard_normal((3, 4, 16)).astype(np.float32) * 4
    assert_parity(saved, {"x": x})
