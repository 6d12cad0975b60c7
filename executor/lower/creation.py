"""ONNX lowering of validator/ops/creation.py: fill_constant, fill_any_like, assign_value, range,
shape. Constants are converted as Paddle's C++ does (Scalar::to<T>: static_cast, float16 and
bfloat16 through float, round to nearest even)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from executor.lower._builder import OnnxBuilder, Value
from executor.lower.reduce import recast, reshaped
from graph_proto.types import INTEGERS, DType
from validator.ops import NoAttrs, Scalar
from validator.ops.creation import (
    AssignValueAttrs,
    FillAnyLikeAttrs,
    FillConstantAttrs,
    str_value_number,
)

HALVES: Final = frozenset({DType.FP16, DType.BF16})


def _bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 values as bfloat16 words, rounded to nearest even (NaN stays a quiet NaN)."""
    words = np.asarray(values, np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((words + 0x7FFF + ((words >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(values), np.uint16(0x7FC0), rounded)


def paddle_array(values: Sequence[Scalar], dtype: DType) -> np.ndarray:
    """Python numbers stored as Paddle stores them in `dtype` (bfloat16: as float32 values that
    `tensor()` turns into bfloat16 words)."""
    if dtype == DType.BOOL:
        return np.asarray([v != 0 for v in values], np.bool_)
    if dtype in INTEGERS:
        # NOTE: C++ casts truncate toward zero; the rule has checked finiteness and range.
        return np.asarray([math.trunc(v) for v in values], dtype.numpy)
    doubles = np.asarray(values, np.float64)
    if dtype in HALVES:
        return doubles.astype(np.float32)  # float16(double) and bfloat16(double) go via float
    return doubles.astype(dtype.numpy)


def tensor(array: np.ndarray, dtype: DType, name: str) -> onnx.TensorProto:
    """A TensorProto of `dtype` from paddle_array()'s result."""
    if dtype == DType.BF16:
        words = _bf16_bits(array)
        return helper.make_tensor(
            name, TensorProto.BFLOAT16, array.shape, words.tobytes(), raw=True
        )
    return numpy_helper.from_array(np.ascontiguousarray(array.astype(dtype.numpy)), name)


def _filled(b: OnnxBuilder, dims: str, number: float, dtype: DType) -> str:
    """A tensor of `dims` (a 1-D int64 value) holding `number` as Paddle stores it in `dtype`."""
    # NOTE: ConstantOfShape takes bfloat16 only from opset 20: fill float32, then round to
    # nearest even as Paddle's bfloat16(float) does.
    computed = DType.FP32 if dtype == DType.BF16 else dtype
    fill = tensor(paddle_array([number], dtype), computed, "value")
    return recast(b, b.op("ConstantOfShape", dims, value=fill), computed, dtype)


# --- fill_constant ------------------------------------------------------------------------------


def _dims(
    b: OnnxBuilder, shape: Value | None, shape_list: tuple[Value, ...] | None, static: Sequence[int]
) -> str:
    """The output dims as a 1-D int64 value: static when known, else from the shape tensors."""
    tensors = (shape,) if shape is not None else shape_list or ()
    if all(t.type.value is not None for t in tensors) and all(d >= 0 for d in static):
        return b.ints(static)
    if shape is not None:
        return reshaped(b, recast(b, shape.name, shape.dtype, DType.INT64), [-1])
    parts = [reshaped(b, recast(b, t.name, t.dtype, DType.INT64), [1]) for t in tensors]
    return b.op("Concat", *parts, axis=0)


def _fill_constant_emit(
    b: OnnxBuilder,
    value: Value | None,
    shape: Value | None,
    shape_list: tuple[Value, ...] | None,
    a: FillConstantAttrs,
) -> str:
    out = b.out()
    dims = _dims(b, shape, shape_list, out.shape)
    if value is None:
        # Paddle's order; the rule has refused a str_value that is not a number a double holds.
        number = float(str_value_number(a.str_value)) if a.str_value else a.value
        return _filled(b, dims, number, out.dtype)
    # NOTE: a ValueTensor is read as a Scalar and cast like an attribute: via float for halves.
    computed = DType.FP32 if out.dtype in HALVES else out.dtype
    scalar = reshaped(b, recast(b, value.name, value.dtype, computed), [])
    return recast(b, b.op("Expand", scalar, dims), computed, out.dtype)


# --- fill_any_like ------------------------------------------------------------------------------


def _fill_any_like_emit(b: OnnxBuilder, x: Value, a: FillAnyLikeAttrs) -> str:
    return _filled(b, b.op("Shape", x.name), a.value, b.out().dtype)


# --- assign_value -------------------------------------------------------------------------------


def _assign_value_emit(b: OnnxBuilder, a: AssignValueAttrs) -> str:
    out = b.out()
    # The rule has checked that exactly one list holds all the values.
    values = a.values or a.bool_values or a.fp32_values or a.int32_values or a.int64_values
    array = paddle_array(values, out.dtype).reshape(out.shape)
    if out.dtype != DType.BF16:
        return b.const(array.astype(out.dtype.numpy), hint="assign_value")
    name = b.fresh("assign_value")
    b.initializers.append(tensor(array, out.dtype, name))
    return name


# --- range --------------------------------------------------------------------------------------


def _step_or_zero(b: OnnxBuilder, start: str, end: str, step: str, dtype: DType) -> str:
    """1, or 0 where Paddle refuses the bounds (a zero step, or one moving away from End):
    the index Range's delta, so that onnxruntime fails the request cleanly there."""
    zero = b.scalar(0, dtype)
    up = b.op("And", b.op("Less", start, end), b.op("Less", step, zero))
    down = b.op("And", b.op("Greater", start, end), b.op("Greater", step, zero))
    bad = b.op("Or", b.op("Equal", step, zero), b.op("Or", up, down))
    return b.cast(b.op("Not", bad), DType.INT64)


def _range_length(b: OnnxBuilder, start: str, end: str, step: str, dtype: DType) -> str:
    """Paddle's GetSize, in the bounds' dtype: ceil(|(end - start) / step|) for floats, and
    (|end - start| + |step| - 1) / |step| for integers."""
    span = b.op("Sub", end, start)
    if dtype not in INTEGERS:
        return b.cast(b.op("Ceil", b.op("Abs", b.op("Div", span, step))), DType.INT64)
    magnitude = b.op("Abs", step)
    total = b.op("Sub", b.op("Add", b.op("Abs", span), magnitude), b.scalar(1, dtype))
    # A zero step divides by 1 here (never by 0); the index Range then refuses it.
    divisor = b.op("Max", magnitude, b.scalar(1, dtype))
    return recast(b, b.op("Div", total, divisor), dtype, DType.INT64)


def _range_emit(b: OnnxBuilder, start: Value, end: Value, step: Value, _a: NoAttrs) -> str:
    computed = DType.FP32 if start.dtype in HALVES else start.dtype
    s, e, st = (reshaped(b, recast(b, v.name, v.dtype, computed), []) for v in (start, end, step))
    count = _range_length(b, s, e, st, computed)
    index = b.op("Range", b.scalar(0, DType.INT64), count, _step_or_zero(b, s, e, st, computed))
    if computed in INTEGERS:
        out = b.op("Add", s, b.op("Mul", b.cast(index, computed), st))
    else:
        # NOTE: Paddle's CPU kernel accumulates (value += step), which rounds differently from
        # start + i * step; CumSum over [start, step, step, ...] adds in the same order.
        length = b.op("Shape", index)
        terms = b.op("Concat", reshaped(b, s, [1]), b.op("Expand", st, length), axis=0)
        running = b.op("CumSum", terms, b.const(np.asarray(0, np.int64), hint="axis"))
        out = b.op("Slice", running, b.ints([0]), length)
    return recast(b, out, computed, start.dtype)


# --- shape --------------------------------------------------------------------------------------


def _shape_emit(b: OnnxBuilder, x: Value, _a: NoAttrs) -> str:
    return b.cast(b.op("Shape", x.name), DType.INT32)


EMITTERS: Final = {
    "fill_constant": _fill_constant_emit,
    "fill_any_like": _fill_any_like_emit,
    "assign_value": _assign_value_emit,
    "range": _range_emit,
    "shape": _shape_emit,
}
