"""The range reading behind guard-free indices (executor/lower/_ranges.py), held against the
values onnxruntime computes: every value inside the range (sound), and the extremes held where
the reading says `exact`; what it cannot follow it leaves unknown (None), so a guard stays."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from executor.lower import IR_VERSION, ONNX_OPSET, OnnxBuilder
from executor.lower._ranges import GraphFacts, ValueRange, value_range
from graph_proto.types import DType

INT64 = DType.INT64
SHAPES = [(1, 1), (2, 5), (3, 1), (1, 7), (0, 4), (2, 0)]


def builder() -> OnnxBuilder:
    b = OnnxBuilder()
    b.feeds = {"ids": 2}
    return b


def facts(b: OnnxBuilder, integers: dict[str, np.ndarray] | None = None) -> GraphFacts:
    """What the converter hands the reading: `integers` are integer parameters."""
    params = dict(integers or {})
    return GraphFacts(b._producers, b._constants, params, frozenset(params), b.feeds, b.dim_of)


def ones_like_ids(b: OnnxBuilder, value: int = 1) -> str:
    fill = helper.make_tensor("v", TensorProto.INT64, [1], [value])
    return b.op("ConstantOfShape", b.op("Shape", "ids"), value=fill)


def computed(
    b: OnnxBuilder, out: str, ids: np.ndarray, params: dict[str, np.ndarray]
) -> np.ndarray:
    """`out`'s values for these ids, by onnxruntime."""
    initializers = [
        helper.make_tensor(n, TensorProto.INT64, a.shape, a.ravel()) for n, a in params.items()
    ]
    graph = helper.make_graph(
        b.nodes,
        "ranges",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [None, None])],
        [helper.make_tensor_value_info(out, TensorProto.INT64, None)],
        [*b.initializers, *initializers],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", ONNX_OPSET)], ir_version=IR_VERSION
    )
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, {"ids": ids})[0])


def assert_holds(found: ValueRange, values: np.ndarray, shape: tuple[int, ...]) -> None:
    shapes = {"ids": shape}
    if values.size == 0:
        if found.empty_with not in (None, ""):
            assert 0 in shapes[found.empty_with]
        return
    if found.empty_with == "ids":
        assert 0 not in shape
    assert found.low.at(shapes) <= values.min() and values.max() <= found.high.at(shapes)
    if found.exact:
        assert values.min() == found.low.at(shapes) and values.max() == found.high.at(shapes)


def position_ids(b: OnnxBuilder, *, exclusive: int = 0, step: int = 1, scale: int = 1) -> str:
    """cumsum(fill(step), axis 1) - fill(1), times `scale` (BERT's position ids at 1, 1)."""
    summed = b.op("CumSum", ones_like_ids(b, step), b.ints([1]), exclusive=exclusive)
    shifted = b.op("Sub", summed, ones_like_ids(b))
    return b.op("Mul", shifted, b.scalar(scale, INT64)) if scale != 1 else shifted


CASES: dict[str, Callable[[OnnxBuilder], str]] = {
    "bert position ids": lambda b: position_ids(b),
    "exclusive, step 3": lambda b: position_ids(b, exclusive=1, step=3),
    "times -2": lambda b: position_ids(b, scale=-2),
    "zeros like ids": lambda b: ones_like_ids(b, 0),
    "cast and reshaped": lambda b: b.cast(
        b.op("Reshape", b.cast(position_ids(b), DType.INT32), b.ints([-1])), INT64
    ),
    "plus a number": lambda b: b.op("Add", b.scalar(5, INT64), position_ids(b)),
}


@pytest.mark.parametrize(("case", "shape"), list(itertools.product(CASES, SHAPES)))
def test_a_read_range_holds_the_values_and_their_extremes_where_exact(
    case: str, shape: tuple[int, int]
) -> None:
    b = builder()
    out = CASES[case](b)
    found = value_range(out, facts(b))
    assert found is not None and found.exact
    assert_holds(found, computed(b, out, np.zeros(shape, np.int64), {}), shape)


def test_position_ids_top_follows_the_sequence_dim() -> None:
    b = builder()
    found = value_range(position_ids(b), facts(b))
    assert found is not None
    assert (found.low.const, found.low.dim) == (0, None)
    assert (found.high.const, found.high.coef, found.high.dim) == (-1, 1, ("ids", 1))
    assert found.empty_with == "ids"


def test_a_slice_of_a_constant_arange_is_within_it_but_not_exact() -> None:
    """mobilebert's position_ids[:, :S]: within [0, 511] whatever S, so no check is needed."""
    b = builder()
    arange = np.arange(512, dtype=np.int64)[None, :]
    end = b.op("Slice", b.op("Shape", "ids"), b.ints([1]), b.ints([2]))
    out = b.op("Slice", "arange", b.ints([0]), end, b.ints([1]))
    found = value_range(out, facts(b, {"arange": arange}))
    assert found is not None and not found.exact
    assert (found.low.const, found.high.const, found.high.dim) == (0, 511, None)
    for shape in [(1, 3), (2, 512), (1, 0)]:
        assert_holds(found, computed(b, out, np.zeros(shape, np.int64), {"arange": arange}), shape)


def test_what_the_reading_does_not_follow_stays_unknown() -> None:
    """A running count of a mask (RoBERTa's position ids: data decides the top), the ids
    themselves (checked on the host), a float fill, and a BF16 parameter's raw words."""
    b = builder()
    mask = b.cast(b.op("Not", b.op("Equal", "ids", b.scalar(1, INT64))), INT64)
    counted = b.op("CumSum", mask, b.ints([1]))
    floats = b.op("ConstantOfShape", b.op("Shape", "ids"))
    raw_bf16 = b.op("Gather", "table", b.ints([0]))
    known = facts(b)
    known = GraphFacts(
        known.producers,
        known.constants,
        {"table": np.arange(4, dtype=np.uint16)},  # a BF16 parameter: not an integer one
        frozenset(),
        known.feed_ranks,
        known.dim_of,
    )
    found = {name: value_range(name, known) for name in (counted, "ids", floats, raw_bf16)}
    assert found == dict.fromkeys(found)
