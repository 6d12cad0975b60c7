"""ONNX lowering of validator/ops/unary_math.py, with Paddle's conversions of float attributes
and one-element tensors to X's dtype (integers truncate toward zero, as a C++ cast does)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from executor.lower._builder import OnnxBuilder, Value
from executor.lower.activation import (
    attr_const,
    erf,
    math_dtype,
    narrow,
    unary_op,
    widen,
)
from graph_proto.types import FLOATS, DType
from validator.ops.unary_math import ClipAttrs, PowAttrs, ScaleAttrs, cpp_int, int_range


def scalar_input(b: OnnxBuilder, t: Value, *dtypes: DType) -> str:
    """A one-element tensor as a 0-D value, cast through `dtypes` in turn (the last is X's),
    each half type standing for float32, the dtype its math runs in."""
    name, current = b.op("Reshape", t.name, b.ints([])), t.dtype
    for dtype in map(math_dtype, dtypes):
        if dtype != current:
            name, current = b.cast(name, dtype), dtype
    return name


def _operand(b: OnnxBuilder, what: str, t: Value | None, attr: float, dtype: DType) -> str:
    """An attribute or the tensor that replaces it, as the kernel for `dtype` reads it."""
    if t is not None:
        return scalar_input(b, t, dtype)
    if dtype in FLOATS:
        return attr_const(b, attr, dtype)
    return b.scalar(cpp_int(what, attr, dtype), dtype)  # the rule has checked it converts


def _float_or_int(float_op: str, int_op: str) -> Callable[..., str]:
    float_emit = unary_op(float_op)

    def emit(b: OnnxBuilder, x: Value, a: object) -> str:
        return float_emit(b, x, a) if x.dtype in FLOATS else b.op(int_op, x.name)

    return emit


def _rsqrt_emit(b: OnnxBuilder, x: Value, _a: object) -> str:
    v, _ = widen(b, x)
    return narrow(b, b.op("Reciprocal", b.op("Sqrt", v)), x.dtype)


def _square_emit(b: OnnxBuilder, x: Value, _a: object) -> str:
    v = widen(b, x)[0]
    return narrow(b, b.op("Mul", v, v), x.dtype)


def _erf_emit(b: OnnxBuilder, x: Value, _a: object) -> str:
    v, t = widen(b, x)
    return narrow(b, erf(b, v, t), x.dtype)


def _logical_not_emit(b: OnnxBuilder, x: Value, _a: object) -> str:
    if x.dtype == DType.BOOL:
        return b.op("Not", x.name)
    v, t = widen(b, x)
    return b.op("Equal", v, b.scalar(0, t))  # nan is true, so not nan is false


def _bitwise_not_emit(b: OnnxBuilder, x: Value, _a: object) -> str:
    if x.dtype == DType.BOOL:
        return b.op("Not", x.name)
    # NOTE: opset 17 has no BitwiseNot; in two's complement ~x is -1 - x, which never overflows
    # (uint8: 255 - x). onnxruntime's Sub has no 8/16-bit kernels: computed in int32.
    wide = x.dtype if x.dtype in (DType.INT32, DType.INT64) else DType.INT32
    all_ones = -1 if x.dtype != DType.UINT8 else 255
    v = x.name if wide == x.dtype else b.cast(x.name, wide)
    out = b.op("Sub", b.scalar(all_ones, wide), v)
    return out if wide == x.dtype else b.cast(out, x.dtype)


def _int_power(b: OnnxBuilder, x: str, n: int) -> str:
    """x ** n by squaring, wrapping on overflow as Paddle's (Eigen's) integer pow does."""
    base, result = x, None
    while n:
        if n & 1:
            result = base if result is None else b.op("Mul", result, base)
        n >>= 1
        if n:
            base = b.op("Mul", base, base)
    assert result is not None, "n >= 1"
    return result if result != x else b.op("Identity", x)


def _pow_emit(b: OnnxBuilder, x: Value, factor: Value | None, a: PowAttrs) -> str:
    # NOTE: the kernel reads the factor as a C++ float (a FactorTensor too) and casts it to X's
    # dtype: 2.7 is 2 for integer X.
    if factor is not None:
        exponent = scalar_input(b, factor, DType.FP32, x.dtype)
        v = widen(b, x)[0]
        return narrow(b, b.op("Pow", v, exponent), x.dtype)
    if x.dtype in FLOATS:
        v, _ = widen(b, x)
        return narrow(b, b.op("Pow", v, attr_const(b, a.factor, x.dtype)), x.dtype)
    n = cpp_int("factor", a.factor, x.dtype)  # the rule has refused n < 0 and no conversion
    if n == 0:
        return b.op("Expand", b.scalar(1, x.dtype), b.op("Shape", x.name))
    return _int_power(b, x.name, n)


def _scale_emit(
    b: OnnxBuilder, x: Value, scale: Value | None, bias: Value | None, a: ScaleAttrs
) -> str:
    v = widen(b, x)[0]
    s = _operand(b, "scale", scale, a.scale, x.dtype)
    c = _operand(b, "bias", bias, a.bias, x.dtype)
    if a.bias_after_scale:
        out = b.op("Add", b.op("Mul", v, s), c)
    else:
        out = b.op("Mul", b.op("Add", v, c), s)
    return narrow(b, out, x.dtype)


def _clip_bound(b: OnnxBuilder, what: str, t: Value | None, attr: float, dtype: DType) -> str:
    if t is None and dtype not in FLOATS and what == "min" and attr < int_range(dtype)[0]:
        # -FLT_MAX (an open side) casts to the type's minimum: clipping there changes nothing.
        return b.scalar(int_range(dtype)[0], dtype)
    return _operand(b, what, t, attr, dtype)


def _clip_emit(b: OnnxBuilder, x: Value, lo: Value | None, hi: Value | None, a: ClipAttrs) -> str:
    v = widen(b, x)[0]
    low = _clip_bound(b, "min", lo, a.min, x.dtype)
    high = _clip_bound(b, "max", hi, a.max, x.dtype)
    return narrow(b, b.op("Clip", v, low, high), x.dtype)


def _cast_emit(b: OnnxBuilder, x: Value, _a: object) -> str:
    # onnxruntime's Cast truncates floats toward zero and goes through int32 for narrower
    # integers, as Paddle's kernel does; nan becomes True for bool.
    return b.cast(x.name, b.out().dtype)


def _assign_emit(b: OnnxBuilder, x: Value, _a: object) -> str:
    return b.op("Identity", x.name)


EMITTERS: Final = {
    "bitwise_not": _bitwise_not_emit,
    "exp": unary_op("Exp"),
    "log": unary_op("Log"),
    "sqrt": unary_op("Sqrt"),
    "rsqrt": _rsqrt_emit,
    "square": _square_emit,
    "abs": _float_or_int("Abs", "Abs"),
    "floor": _float_or_int("Floor", "Identity"),
    "ceil": _float_or_int("Ceil", "Identity"),
    "erf": _erf_emit,
    "sin": unary_op("Sin"),
    "cos": unary_op("Cos"),
    "logical_not": _logical_not_emit,
    "pow": _pow_emit,
    "scale": _scale_emit,
    "clip": _clip_emit,
    "cast": _cast_emit,
    "assign": _assign_emit,
}
