"""Tensors sized by input data (threats.md 3.3): accepted with a warning, bounded per request."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from executor import SessionOptions, compile
from executor.errors import TensorTooLarge
from graph_proto.types import DType
from tests.support.builders import arange_of_feed
from validator import DEFAULT_POLICY, Code, validate

INT64 = DType.INT64


def test_a_size_from_input_data_is_a_warning_at_compile_time() -> None:
    g = arange_of_feed()
    program = validate(g.program_bytes(), g.params_bytes())
    assert program.report.data_dependent == ("o",)
    assert [w.code for w in program.report.warnings] == [Code.DATA_DEPENDENT_SHAPE]


def test_each_request_is_bounded_before_it_runs() -> None:
    g = arange_of_feed()
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
