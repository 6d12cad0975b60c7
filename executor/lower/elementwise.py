"""ONNX lowering of validator/ops/elementwise.py: Paddle's axis alignment, then numpy broadcasting."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from executor.lower._builder import OnnxBuilder, Value
from graph_proto.types import FLOATS, DType
from validator.ops.elementwise import ElementwiseAttrs


def align(b: OnnxBuilder, x: Value, y: Value, axis: int) -> tuple[str, str]:
    """Unsqueezes the lower-rank operand so that right-aligned broadcasting matches Paddle's axis."""
    if x.rank == y.rank or axis == -1:
        return x.name, y.name
    big, small = (x, y) if x.rank > y.rank else (y, x)
    trailing = big.rank - small.rank - axis  # 1s Paddle puts after the small operand
    if trailing <= 0:
        return x.name, y.name
    axes = list(range(small.rank, small.rank + trailing))
    padded = b.op("Unsqueeze", small.name, b.ints(axes))
    return (x.name, padded) if x.rank > y.rank else (padded, y.name)


def binary(onnx_type: str, negate: bool = False) -> Callable[..., str]:
    def emit(b: OnnxBuilder, x: Value, y: Value, a: ElementwiseAttrs) -> str:
        out = b.op(onnx_type, *align(b, x, y, a.axis))
        return b.op("Not", out) if negate else out

    return emit


def nonzero(b: OnnxBuilder, y: str) -> str:
    """`y` as it is when it holds no 0; otherwise the run fails at the returned value's Reshape
    (explained by the op it belongs to), before an integer division by 0 can crash the process.
    Reshape checks its element count on the host for every provider (see guard_range)."""
    is_zero = b.cast(b.op("Equal", y, b.scalar(0, DType.INT64)), DType.INT64)
    zeros = b.op("ReduceSum", is_zero, keepdims=0)
    ok = b.cast(b.op("Equal", zeros, b.scalar(0, DType.INT64)), DType.INT64)
    flat = b.op("Reshape", y, b.ints([-1]))
    guarded = b.op("Reshape", flat, b.op("Mul", b.op("Shape", flat), ok), allowzero=1)
    return b.op("Reshape", guarded, b.op("Shape", y))


def _int_floordiv(b: OnnxBuilder, x: str, y: str, dtype: DType) -> str:
    """Truncating division, minus one where the signs differ and the remainder is not 0.
    Computed in int32/int64: y = -1 is negation (INT_MIN / -1 would trap in ONNX's Div)."""
    y = nonzero(b, y if dtype == DType.INT64 else b.cast(y, DType.INT64))
    wide = DType.INT64
    x = x if dtype == DType.INT64 else b.cast(x, wide)
    zero, one = b.scalar(0, wide), b.scalar(1, wide)
    minus_one = b.op("Equal", y, b.scalar(-1, wide))
    quotient = b.op("Div", x, b.op("Where", minus_one, one, y))
    quotient = b.op("Where", minus_one, b.op("Neg", x), quotient)
    remainder = b.op("Sub", x, b.op("Mul", quotient, y))
    signs_differ = b.op("Xor", b.op("Less", x, zero), b.op("Less", y, zero))
    inexact = b.op("Not", b.op("Equal", remainder, zero))
    quotient = b.op("Sub", quotient, b.cast(b.op("And", signs_differ, inexact), wide))
    return quotient if dtype == wide else b.cast(quotient, dtype)


def _float_floordiv(b: OnnxBuilder, x: str, y: str, dtype: DType) -> str:
    """Paddle's (and Python's) float floor division: from fmod, not floor(x / y), so that the
    quotient of exact multiples is exact; a 0 divisor gives x / y (inf or nan)."""
    zero, one, half = (b.scalar(v, dtype) for v in (0.0, 1.0, 0.5))
    mod = b.op("Mod", x, y, fmod=1)
    div = b.op("Div", b.op("Sub", x, mod), y)
    signs_differ = b.op("Xor", b.op("Less", y, zero), b.op("Less", mod, zero))
    fix = b.op("And", b.op("Not", b.op("Equal", mod, zero)), signs_differ)
    div = b.op("Where", fix, b.op("Sub", div, one), div)
    floor = b.op("Floor", div)
    floor = b.op(
        "Where", b.op("Greater", b.op("Sub", div, floor), half), b.op("Add", floor, one), floor
    )
    return b.op("Where", b.op("Equal", y, zero), b.op("Div", x, y), floor)


def _floordiv_emit(b: OnnxBuilder, x: Value, y: Value, a: ElementwiseAttrs) -> str:
    xa, ya = align(b, x, y, a.axis)
    if x.dtype in FLOATS:
        return _float_floordiv(b, xa, ya, x.dtype)
    return _int_floordiv(b, xa, ya, x.dtype)


EMITTERS: Final = {
    "elementwise_floordiv": _floordiv_emit,
    "elementwise_add": binary("Add"),
    "elementwise_sub": binary("Sub"),
    "elementwise_mul": binary("Mul"),
    "elementwise_div": binary("Div"),
    "elementwise_max": binary("Max"),
    "elementwise_min": binary("Min"),
    "elementwise_pow": binary("Pow"),
    "equal": binary("Equal"),
    "not_equal": binary("Equal", negate=True),
    "greater_than": binary("Greater"),
    "greater_equal": binary("GreaterOrEqual"),
    "less_than": binary("Less"),
    "less_equal": binary("LessOrEqual"),
    "logical_and": binary("And"),
    "logical_or": binary("Or"),
}
