"""Integer elementwise ops carry the values of small tensors (shape arithmetic such as Swin's
`B // nW` in a reshape's ShapeTensor) exactly as Paddle's integer kernels compute them."""

from __future__ import annotations

import pytest

from graph_proto.types import DType
from validator import TensorType
from validator.infer import infer_values
from validator.ops import OpDef
from validator.ops.elementwise import (
    ELEMENTWISE_ADD,
    ELEMENTWISE_DIV,
    ELEMENTWISE_FLOORDIV,
    ELEMENTWISE_MUL,
    ElementwiseAttrs,
)


def _ints(*values: int, dtype: DType = DType.INT64) -> TensorType:
    return TensorType(dtype, (len(values),), values)


def _value(op: OpDef, x: TensorType, y: TensorType) -> tuple[object, ...] | None:
    (out,) = infer_values(op, [x, y], ElementwiseAttrs())
    assert isinstance(out, TensorType)
    return out.value


@pytest.mark.parametrize(
    ("op", "expected"),
    [
        (ELEMENTWISE_DIV, (-3, -3, 2, 1)),  # C++ `/`: toward zero
        (ELEMENTWISE_FLOORDIV, (-4, -4, 2, 1)),  # Python's floor
        (ELEMENTWISE_ADD, (-5, 5, -9, 10)),
        (ELEMENTWISE_MUL, (-14, -14, 18, 24)),
    ],
)
def test_int_values_follow_paddles_kernels(op: OpDef, expected: tuple[int, ...]) -> None:
    assert _value(op, _ints(-7, 7, -6, 6), _ints(2, -2, -3, 4)) == expected


def test_the_batch_of_swins_windows_is_known_once_the_batch_is() -> None:
    batch, windows = TensorType(DType.INT32, (), (2048,)), _ints(64, dtype=DType.INT32)
    assert _value(ELEMENTWISE_FLOORDIV, batch, windows) == (32,)


def test_no_value_for_a_zero_divisor_or_an_unknown_operand() -> None:
    assert _value(ELEMENTWISE_DIV, _ints(4, 5), _ints(2, 0)) is None  # the run fails there
    assert _value(ELEMENTWISE_FLOORDIV, _ints(4), _ints(0)) is None
    assert _value(ELEMENTWISE_ADD, TensorType(DType.INT64, (1,)), _ints(1)) is None
    floats = TensorType(DType.FP32, (1,), (3.0,))
    assert _value(ELEMENTWISE_ADD, floats, floats) is None  # only integer shape arithmetic
