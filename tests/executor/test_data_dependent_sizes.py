"""Tensors sized by input data (threats.md 3.3): accepted with a warning, bounded per request."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from executor import SessionOptions, compile
from executor.errors import TensorTooLarge
from graph_proto.types import DType
from tests.support.builders import GraphBuilder, V
from validator import DEFAULT_POLICY, Code, validate

INT64 = DType.INT64


def _range_program() -> GraphBuilder:
    """arange(0, n): its length is the value of the feed n."""
    g = GraphBuilder()
    g.feed("n", INT64, [1])
    fill = {"shape": [1], "dtype": int(INT64)}
    g.node("fill_constant", {}, {"Out": [V("zero", [1], INT64)]}, {**fill, "value": 0.0})
    g.node("fill_constant", {}, {"Out": [V("one", [1], INT64)]}, {**fill, "value": 1.0})
    g.node(
        "range", {"Start": ["zero"], "End": ["n"], "Step": ["one"]}, {"Out": [V("o", [-1], INT64)]}
    )
    g.fetch("o")
    return g


def test_a_size_from_input_data_is_a_warning_at_compile_time() -> None:
    g = _range_program()
    program = validate(g.program_bytes(), g.params_bytes())
    assert program.report.data_dependent == ("o",)
    assert [w.code for w in program.report.warnings] == [Code.DATA_DEPENDENT_SHAPE]


def test_each_request_is_bounded_before_it_runs() -> None:
    g = _range_program()
    # max_dynamic_dim bounds the compile-time estimate; the request is checked with its own value.
    policy = replace(DEFAULT_POLICY, max_tensor_bytes=8 * 100, max_dynamic_dim=100)
    model = compile(
        validate(g.program_bytes(), g.params_bytes(), policy), SessionOptions(use_cuda=False)
    )
    np.testing.assert_array_equal(model.run({"n": np.array([5])})["o"], np.arange(5))
    with pytest.raises(
        TensorTooLarge, match=r"tensor 'o' int64\[1000000000\]: expected at most 800 bytes"
    ):
        model.run({"n": np.array([10**9])})
