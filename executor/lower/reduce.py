"""ONNX lowering of validator/ops/reduce.py: reduce_*, logsumexp, p_norm, arg_max/min, top_k_v2,
cumsum. Every emitter passes explicit axes, so an empty `axes` never means "all" by accident."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Final

import numpy as np

from executor.lower._builder import OnnxBuilder, Value
from graph_proto.types import INTEGERS, DType
from validator.ops import norm_axis
from validator.ops.reduce import (
    ArgAttrs,
    CumsumAttrs,
    LogsumexpAttrs,
    PNormAttrs,
    ReduceAttrs,
    TopKAttrs,
    _reduced_axes,
    p_norm_of_nothing,
)

# NOTE: onnxruntime's CPU kernels cover few dtypes (ReduceSum/MatMul/CumSum: float, double,
# int32, int64). Narrow dtypes are computed in a wider one where the result is exact (orders,
# integer sums modulo the width) or as exact as Paddle's own mixed-precision kernels (fp16/bf16).
WIDER: Final = {
    DType.FP16: DType.FP32,
    DType.BF16: DType.FP32,
    DType.INT8: DType.INT32,
    DType.UINT8: DType.INT32,
    DType.INT16: DType.INT32,
}
ARITHMETIC: Final = frozenset({DType.FP32, DType.FP64, DType.INT32, DType.INT64})
ORDERED: Final = ARITHMETIC | {DType.INT8, DType.UINT8}  # ArgMax, ReduceMax/Min, TopK
FLOATING: Final = frozenset({DType.FP32, DType.FP64})


def widened(
    b: OnnxBuilder, x: Value, supported: frozenset[DType] = ARITHMETIC
) -> tuple[str, DType]:
    """X as a dtype onnxruntime computes with (X itself when it already is one)."""
    if x.dtype in supported:
        return x.name, x.dtype
    wide = WIDER.get(x.dtype)
    assert wide is not None, f"the op's type rule admits {x.dtype.label}, which has no wider dtype"
    return b.cast(x.name, wide), wide


def recast(b: OnnxBuilder, name: str, have: DType, want: DType) -> str:
    """`name` (of dtype `have`) as dtype `want`, e.g. a result computed wide cast back."""
    return name if have == want else b.cast(name, want)


def reduce(b: OnnxBuilder, onnx_op: str, name: str, axes: Sequence[int], keep: bool) -> str:
    """One ONNX reduction over explicit axes; no axes (a 0-D input) reduces nothing."""
    if not axes:
        return name
    if onnx_op == "ReduceSum":  # NOTE: at opset 17 only ReduceSum takes its axes as an input
        return b.op(onnx_op, name, b.ints(axes), keepdims=int(keep))
    return b.op(onnx_op, name, axes=list(axes), keepdims=int(keep))


def reshaped(b: OnnxBuilder, name: str, shape: Sequence[int]) -> str:
    """Reshape to a static shape; allowzero so that a 0 in `shape` means an empty dim."""
    return b.op("Reshape", name, b.ints(shape), allowzero=int(0 in shape))


# --- reduce_* -----------------------------------------------------------------------------------


def _reduce_sum_emit(b: OnnxBuilder, x: Value, a: ReduceAttrs) -> str:
    axes = _reduced_axes(x.type, a.dim, a.reduce_all)
    dtype = b.out().dtype
    # NOTE: Paddle casts X to the output dtype first (bool and int32 sum as int64, out_dtype).
    source = recast(b, x.name, x.dtype, dtype)
    if dtype == DType.BOOL:
        # A bool accumulator saturates at true: the sum is "any".
        ints = b.cast(source, DType.INT32)
        return b.cast(reduce(b, "ReduceMax", ints, axes, a.keep_dim), DType.BOOL)
    # int8/uint8/int16 sum in int64 and wrap back exactly as a narrow accumulator does.
    computed = dtype if dtype in ARITHMETIC else DType.INT64 if dtype in INTEGERS else DType.FP32
    summed = reduce(b, "ReduceSum", recast(b, source, dtype, computed), axes, a.keep_dim)
    return recast(b, summed, computed, dtype)


def reduction(onnx_op: str, supported: frozenset[DType] = ARITHMETIC) -> Callable[..., str]:
    """reduce_mean/max/min/prod: the ONNX reduction in X's dtype (or a wider one)."""

    def emit(b: OnnxBuilder, x: Value, a: ReduceAttrs) -> str:
        axes = _reduced_axes(x.type, a.dim, a.reduce_all)
        name, computed = widened(b, x, supported)
        # NOTE: integer means truncate toward zero in both Paddle and onnxruntime.
        return recast(b, reduce(b, onnx_op, name, axes, a.keep_dim), computed, x.dtype)

    return emit


# --- logsumexp ----------------------------------------------------------------------------------


def _logsumexp_emit(b: OnnxBuilder, x: Value, a: LogsumexpAttrs) -> str:
    axes = _reduced_axes(x.type, a.axis, a.reduce_all)
    name, computed = widened(b, x, FLOATING)
    # onnxruntime subtracts the maximum first, as Paddle does, so large inputs do not overflow;
    # a 0-D input reduces nothing and is returned as is (max + log(exp(0)) = X exactly).
    return recast(b, reduce(b, "ReduceLogSumExp", name, axes, a.keepdim), computed, x.dtype)


# --- p_norm -------------------------------------------------------------------------------------


def _p_norm_emit(b: OnnxBuilder, x: Value, a: PNormAttrs) -> str:
    if x.rank == 0 and not a.asvector:
        # NOTE: Paddle reduces a 0-D X over no element at all: a constant, X is never read.
        computed = x.dtype if x.dtype in FLOATING else DType.FP32
        nothing = b.scalar(p_norm_of_nothing(a.porder), computed)
        return recast(b, b.op("Identity", nothing), computed, x.dtype)
    name, computed = widened(b, x, FLOATING)
    # A 0-D X with asvector is the norm of its one element.
    axes = tuple(range(x.rank)) if a.asvector else (norm_axis(a.axis, x.rank),)
    # NOTE: epsilon only guards Paddle's gradient; the forward kernel never reads it.
    p = a.porder
    if p == 0:
        nonzero = b.op("Not", b.op("Equal", name, b.scalar(0, computed)))
        out = reduce(b, "ReduceSum", b.cast(nonzero, computed), axes, a.keepdim)
    elif math.isinf(p):
        magnitude = b.op("Abs", name)
        out = reduce(b, "ReduceMax" if p > 0 else "ReduceMin", magnitude, axes, a.keepdim)
    elif p == 1 and axes:
        out = reduce(b, "ReduceL1", name, axes, a.keepdim)
    elif p == 2 and axes:
        out = reduce(b, "ReduceL2", name, axes, a.keepdim)
    else:
        # Paddle: pow(sum(pow(|X|, p)), 1 / p), with 1 / p computed in float32.
        powered = b.op("Pow", b.op("Abs", name), b.scalar(p, computed))
        summed = reduce(b, "ReduceSum", powered, axes, a.keepdim)
        inverse = float(np.float32(1) / np.float32(p))
        out = b.op("Pow", summed, b.scalar(inverse, computed))
    return recast(b, out, computed, x.dtype)


# --- arg_max / arg_min --------------------------------------------------------------------------


def arg(onnx_op: str) -> Callable[..., str]:
    """arg_max / arg_min: Paddle returns the first index among equal values (select_last_index=0)."""

    def emit(b: OnnxBuilder, x: Value, a: ArgAttrs) -> str:
        name, _ = widened(b, x, ORDERED)  # widening keeps the order exactly
        out = b.out()
        if x.rank == 0 or a.flatten:
            flat = reshaped(b, name, [-1])
            index = b.op(onnx_op, flat, axis=0, keepdims=1, select_last_index=0)
            index = reshaped(b, index, out.shape)  # () or all 1s with keepdims
        else:
            axis = norm_axis(a.axis, x.rank)
            index = b.op(onnx_op, name, axis=axis, keepdims=int(a.keepdims), select_last_index=0)
        return recast(b, index, DType.INT64, out.dtype)

    return emit


# --- top_k_v2 -----------------------------------------------------------------------------------


def _top_k_v2_emit(b: OnnxBuilder, x: Value, k: Value | None, a: TopKAttrs) -> list[str]:
    assert a.sorted, "the rule refuses an unsorted top_k"
    if x.rank == 0:
        return [b.op("Identity", x.name), b.const(np.zeros((), np.int64), hint="index")]
    name, computed = widened(b, x, ARITHMETIC)  # widening keeps the order exactly
    count = b.ints([a.k]) if k is None else reshaped(b, b.cast(k.name, DType.INT64), [1])
    # NOTE: ONNX puts the lower index first among equal values (Paddle's CPU kernel leaves ties
    # in std::partial_sort's order: the values agree, tied indices may not).
    values, indices = b.op_n(
        "TopK", name, count, n_outputs=2, axis=norm_axis(a.axis, x.rank), largest=int(a.largest)
    )
    return [recast(b, values, computed, x.dtype), indices]


# --- cumsum -------------------------------------------------------------------------------------


def _cumsum_emit(b: OnnxBuilder, x: Value, a: CumsumAttrs) -> str:
    name, computed = widened(b, x, ARITHMETIC)
    if a.flatten or x.rank == 0:
        name, axis = reshaped(b, name, [-1]), 0  # NOTE: flatten ignores axis
    else:
        axis = norm_axis(a.axis, x.rank)
    out = b.op(
        "CumSum",
        name,
        b.const(np.asarray(axis, np.int64), hint="axis"),
        exclusive=int(a.exclusive),
        reverse=int(a.reverse),
    )
    if x.rank == 0 and not a.flatten:
        out = reshaped(b, out, [])
    return recast(b, out, computed, x.dtype)


EMITTERS: Final = {
    "reduce_sum": _reduce_sum_emit,
    "reduce_mean": reduction("ReduceMean"),
    "reduce_max": reduction("ReduceMax", ORDERED),
    "reduce_min": reduction("ReduceMin", ORDERED),
    "reduce_prod": reduction("ReduceProd"),
    "logsumexp": _logsumexp_emit,
    "p_norm": _p_norm_emit,
    "arg_max": arg("ArgMax"),
    "arg_min": arg("ArgMin"),
    "top_k_v2": _top_k_v2_emit,
    "cumsum": _cumsum_emit,
}
