"""Integer elementwise ops carry the values of small tensors (shape arithmetic such as Swin's
`B // nW` in a reshape's ShapeTensor) exactly as Paddle's integer kernels compute them."""

from __future__ import annotations

import pytest

from graph_proto.types import DType
from validator import TensorType
from validator.infer import infer_values
from validator.ops import NoAttrs, OpDef
from validator.ops.creation import SHAPE
from validator.ops.elementwise import (
    ELEMENTWISE_ADD,
    ELEMENTWISE_DIV,
    ELEMENTWISE_FLOORDIV,
    ELEMENTWISE_MUL,
    ElementwiseAttrs,
)
from validator.ops.slicing import SLICE, SliceAttrs
from validator.ops.unary_math import CAST, CastAttrs


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


def _shape_of(*dims: int) -> TensorType:
    (out,) = infer_values(SHAPE, [TensorType(DType.FP32, dims)], NoAttrs())
    assert isinstance(out, TensorType)
    return out


def _sliced(shape: TensorType, start: int, end: int, *, decrease: bool = False) -> TensorType:
    attrs = SliceAttrs(axes=(0,), starts=(start,), ends=(end,), decrease_axis=(0,) * decrease)
    (out,) = infer_values(SLICE, [shape, None, None, None, None], attrs)
    assert isinstance(out, TensorType)
    return out


def test_the_known_dims_of_a_batched_shape_are_known_once_sliced() -> None:
    # `paddle.shape(x)[2:]` of a [-1, 32, 8, 8] tensor: the size a segmentation head upsamples to.
    shape = _shape_of(-1, 32, 8, 8)
    assert shape.value is None and shape.partial == (None, 32, 8, 8)
    assert _sliced(shape, 2, 4).value == (8, 8)
    assert _sliced(shape, 1, 2, decrease=True).value == (32,)
    assert _sliced(shape, 0, 2).value is None  # the batch is not known
    assert _sliced(shape, 0, 2).partial == (None, 32)
    (as_int64,) = infer_values(CAST, [_sliced(shape, 2, 4)], CastAttrs(2, 3))
    assert isinstance(as_int64, TensorType) and as_int64.value == (8, 8)
    (cast_whole,) = infer_values(CAST, [shape], CastAttrs(2, 3))
    assert isinstance(cast_whole, TensorType) and cast_whole.partial == (None, 32, 8, 8)


def test_no_partial_value_passes_through_arithmetic() -> None:
    # Only picking elements keeps the known ones: an elementwise op on a partly known shape
    # has no value (the unknown batch would take part in it).
    shape = _shape_of(-1, 4)
    (doubled,) = infer_values(
        ELEMENTWISE_MUL, [shape, _ints(2, 2, dtype=DType.INT32)], ElementwiseAttrs()
    )
    assert isinstance(doubled, TensorType) and doubled.value is None and doubled.partial is None
