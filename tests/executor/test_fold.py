"""Constant folding (executor/fold.py): what reads only parameters is computed once, at lowering,
and requests get the same answers; a constant subgraph that fails is left to fail as before."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from executor import SessionOptions, compile
from executor.convert import lower
from executor.session import SessionRefused
from graph_proto.types import DType
from tests.support.builders import GraphBuilder, V, weights
from validator import validate

FP32, INT64 = DType.FP32, DType.INT64
TABLE = weights(6, 4)


def biased(rows: list[int]) -> GraphBuilder:
    """y = x + table[rows] with `rows` a parameter: LeViT's attention biases in small, a gather
    (and its range guard) over a parameter by a parameter, on every request."""
    g = GraphBuilder()
    g.feed("x", FP32, [-1, len(rows), 4])
    g.param("table", TABLE)
    g.param("rows", np.array(rows, np.int64))
    g.node("gather", {"X": ["table"], "Index": ["rows"]}, {"Out": [V("bias", [len(rows), 4])]})
    g.node("elementwise_add", {"X": ["x"], "Y": ["bias"]}, {"Out": [V("y", [-1, len(rows), 4])]})
    g.fetch("y")
    return g


def ops_of(g: GraphBuilder) -> Counter[str]:
    built = g.built()
    model = lower(validate(built.program, built.params)).model
    return Counter(node.op_type for node in model.graph.node)


def test_a_gather_of_parameters_is_computed_once_and_requests_read_the_result() -> None:
    rows = [5, 0, 2, -1]  # Paddle wraps a negative index
    ops = ops_of(biased(rows))
    assert ops["Gather"] == 0 and ops["ReduceMin"] == 0  # the gather and its guard are gone
    assert ops["Add"] == 1
    built = biased(rows).built()
    model = compile(validate(built.program, built.params), SessionOptions(use_cuda=False))
    x = np.random.default_rng(0).standard_normal((3, 4, 4)).astype(np.float32)
    (y,) = model.run({"x": x}).values()
    np.testing.assert_allclose(y, x + TABLE[rows], rtol=0, atol=1e-6)


def test_constant_indices_outside_the_table_are_left_in_the_graph_and_refused_as_before() -> None:
    g = biased([0, 7])
    assert ops_of(g)["Gather"] == 1  # its guard refuses them: nothing was folded
    built = g.built()
    # onnxruntime's own folding meets the failing guard when the session starts, as it did
    # before graphgate folded anything: the upload is refused.
    with pytest.raises(SessionRefused):
        compile(validate(built.program, built.params), SessionOptions(use_cuda=False))


def test_what_depends_on_a_feed_is_never_folded() -> None:
    g = GraphBuilder()
    g.feed("ids", INT64, [-1])
    g.param("table", TABLE)
    g.node("gather", {"X": ["table"], "Index": ["ids"]}, {"Out": [V("rows", [-1, 4])]})
    g.fetch("rows")
    assert ops_of(g)["Gather"] == 1
