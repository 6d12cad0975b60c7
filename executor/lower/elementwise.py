"""ONNX lowering of validator/ops/elementwise.py: Paddle's axis alignment, then numpy broadcasting."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from executor.lower._builder import OnnxBuilder, Value
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


EMITTERS: Final = {
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
