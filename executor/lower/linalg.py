"""ONNX lowering of validator/ops/linalg.py: matmul_v2, legacy matmul and mul, all on MatMul."""

from __future__ import annotations

from typing import Final

from executor.lower._builder import OnnxBuilder, Value
from executor.lower.reduce import recast, reshaped, widened
from graph_proto.types import DType
from validator.ops.linalg import MatmulAttrs, MatmulV2Attrs, MulAttrs


def _transposed(b: OnnxBuilder, name: str, rank: int, transpose: bool) -> str:
    """Swaps the last two dims; a 1-D operand is a vector and Paddle ignores its flag."""
    if not transpose or rank < 2:
        return name
    perm = [*range(rank - 2), rank - 1, rank - 2]
    return b.op("Transpose", name, perm=perm)


def product(b: OnnxBuilder, x: Value, y: Value, trans_x: bool, trans_y: bool) -> tuple[str, DType]:
    """X @ Y with numpy's rules: 1-D operands are a row / a column whose dim is dropped from the
    result, batch dims broadcast.

    Returns the result and the dtype it is computed in (float16/bfloat16 go through float32)."""
    xn, computed = widened(b, x)
    yn, _ = widened(b, y)
    # NOTE: 1-D operands are made 2-D here rather than left to MatMul: onnxruntime 1.31's
    # Transpose+MatMul fusion (FusedMatMul, extended optimizations) computes a transposed
    # batched X times a 1-D Y wrongly.
    dropped = []
    if x.rank == 1:
        xn, dropped = b.op("Unsqueeze", xn, b.ints([0])), [-2]
    if y.rank == 1:
        yn, dropped = b.op("Unsqueeze", yn, b.ints([1])), [*dropped, -1]
    xt = _transposed(b, xn, x.rank, trans_x)
    yt = _transposed(b, yn, y.rank, trans_y)
    out = b.op("MatMul", xt, yt)
    return (b.op("Squeeze", out, b.ints(dropped)) if dropped else out), computed


def _matmul_v2_emit(b: OnnxBuilder, x: Value, y: Value, a: MatmulV2Attrs) -> str:
    out, computed = product(b, x, y, a.trans_x, a.trans_y)
    return recast(b, out, computed, x.dtype)


def _matmul_emit(b: OnnxBuilder, x: Value, y: Value, a: MatmulAttrs) -> str:
    # NOTE: legacy matmul does not broadcast batch dims, but the rule only admits programs where
    # one operand has none or both have equal ones, where numpy broadcasting agrees.
    out, computed = product(b, x, y, a.transpose_X, a.transpose_Y)
    if a.alpha != 1.0:
        out = b.op("Mul", out, b.scalar(a.alpha, computed))
    return recast(b, out, computed, x.dtype)


def _mul_emit(b: OnnxBuilder, x: Value, y: Value, a: MulAttrs) -> str:
    # Flatten(axis=k) is exactly Paddle's flatten_to_2d: [prod(dims[:k]), prod(dims[k:])].
    xn, computed = widened(b, x)
    yn, _ = widened(b, y)
    x2 = b.op("Flatten", xn, axis=a.x_num_col_dims)
    y2 = b.op("Flatten", yn, axis=a.y_num_col_dims)
    out = b.op("MatMul", x2, y2)
    if a.x_num_col_dims != 1 or y.rank - a.y_num_col_dims != 1:
        out = _unflattened(b, out, x, y, a)
    return recast(b, out, computed, x.dtype)


def _unflattened(b: OnnxBuilder, out: str, x: Value, y: Value, a: MulAttrs) -> str:
    """The 2-D product reshaped to X's leading dims followed by Y's trailing dims."""
    target = b.out()
    if target.known:
        return reshaped(b, out, target.shape)
    rows = b.op("Shape", x.name, end=a.x_num_col_dims)
    cols = b.op("Shape", y.name, start=a.y_num_col_dims)
    # NOTE: allowzero, so that an empty dim stays empty instead of copying the input's dim.
    return b.op("Reshape", out, b.op("Concat", rows, cols, axis=0), allowzero=1)


EMITTERS: Final = {
    "matmul_v2": _matmul_v2_emit,
    "matmul": _matmul_emit,
    "mul": _mul_emit,
}
