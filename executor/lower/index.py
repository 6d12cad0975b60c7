"""ONNX lowering of validator/ops/index.py: gather, index_select, lookup_table_v2, one_hot_v2, where.

Negative indices wrap in gather and index_select (Paddle 3 and ONNX Gather agree); an index past
the end fails in both. lookup_table_v2 and one_hot_v2 refuse negative ids in Paddle, where ONNX
Gather would wrap them. Every index is range-checked before it is used (OnnxBuilder.guard_range):
by the session on the host when the indices are a feed as is, else by a guard in the graph. A
request with one outside fails with IndexOutOfRange on every execution provider, never leaving the
check to Gather (onnxruntime's CUDA Gather does not check).
"""

from __future__ import annotations

from typing import Final

import numpy as np

from executor.lower._builder import ONNX_DTYPE, OnnxBuilder, Value
from executor.runtime_checks import IndexCheck
from graph_proto.types import DType
from validator.ops import NoAttrs
from validator.ops.index import GatherAttrs, IndexSelectAttrs, LookupTableV2Attrs, OneHotV2Attrs


def _flat_index(b: OnnxBuilder, index: Value) -> str:
    """Paddle reads an [n, 1] Index as [n]; a 0-D Index stays 0-D (ONNX Gather drops the axis)."""
    return b.op("Reshape", index.name, b.ints([-1])) if index.rank == 2 else index.name


def _gather_emit(
    b: OnnxBuilder, x: Value, index: Value, axis_tensor: Value | None, a: GatherAttrs
) -> str:
    axis = a.axis
    if axis_tensor is not None:
        # The validator only accepts an Axis tensor whose value is known.
        assert axis_tensor.type.value is not None
        axis = int(axis_tensor.type.value[0])
    return _wrapping_gather(b, x, index, axis % x.rank)


def _index_select_emit(b: OnnxBuilder, x: Value, index: Value, a: IndexSelectAttrs) -> str:
    return _wrapping_gather(b, x, index, a.dim % x.rank)


def _wrapping_gather(b: OnnxBuilder, x: Value, index: Value, axis: int) -> str:
    flat = _flat_index(b, index)
    size = _dim_size(b, x, axis, index.dtype)
    known = x.shape[axis] >= 0
    low = b.scalar(-x.shape[axis], index.dtype) if known else b.op("Neg", size)
    check = IndexCheck("Index", index.name, _size_ref(x, axis), wraps=True)
    guarded = b.guard_range(flat, min(index.rank, 1), low, size, check)
    return b.op("Gather", x.name, guarded, axis=axis)


def _size_ref(x: Value, axis: int) -> int | tuple[str, int]:
    """Dim `axis` of x for an IndexCheck: its size when known, else where to read it at run time."""
    return x.shape[axis] if x.shape[axis] >= 0 else (x.name, axis)


def _dim_size(b: OnnxBuilder, x: Value, axis: int, dtype: DType) -> str:
    """Dim `axis` of x as a 0-D scalar of the indices' dtype."""
    if x.shape[axis] >= 0:
        return b.scalar(x.shape[axis], dtype)
    size = b.op("Reshape", b.op("Shape", x.name, start=axis, end=axis + 1), b.ints([]))
    return size if dtype == DType.INT64 else b.cast(size, dtype)


def _zero(b: OnnxBuilder, dtype: DType) -> str:
    if dtype == DType.BF16:  # numpy has no bfloat16: convert in the graph
        return b.cast(b.const(np.array(0, np.float32), hint="zero"), dtype)
    return b.scalar(0, dtype)


def _lookup_table_v2_emit(b: OnnxBuilder, w: Value, ids: Value, a: LookupTableV2Attrs) -> str:
    # Every id outside [0, vocab) fails the request. NOTE: Paddle 3.3's CPU kernel refuses them
    # only without a padding_idx (and lets -1 through); otherwise it reads memory outside W.
    check = IndexCheck("Ids", ids.name, _size_ref(w, 0))
    vocab = _dim_size(b, w, 0, ids.dtype)
    checked = b.guard_range(ids.name, ids.rank, b.scalar(0, ids.dtype), vocab, check)
    rows = b.op("Gather", w.name, checked)
    if a.padding_idx == -1:  # -1: no padding row (Paddle's API turns -k into vocab - k before)
        return rows
    padding = b.op("Equal", ids.name, b.scalar(a.padding_idx, ids.dtype))
    padding = b.op("Unsqueeze", padding, b.ints([ids.rank]))
    # Where, not a multiply by 0: a padding row of inf or NaN still reads as zeros.
    return where(b, padding, _zero(b, w.dtype), rows, w.dtype)


def _depth(b: OnnxBuilder, depth_tensor: Value | None, a: OneHotV2Attrs, dtype: DType) -> str:
    """The depth as a 0-D scalar of the ids' dtype (the tensor, when given, overrides the attr)."""
    if depth_tensor is None:
        return b.scalar(a.depth, dtype)
    if depth_tensor.type.value is not None:
        return b.scalar(int(depth_tensor.type.value[0]), dtype)
    scalar = b.op("Reshape", depth_tensor.name, b.ints([]))
    return scalar if depth_tensor.dtype == dtype else b.cast(scalar, dtype)


def _one_hot_v2_emit(b: OnnxBuilder, x: Value, depth_tensor: Value | None, a: OneHotV2Attrs) -> str:
    """X == range(depth) along a new last dim, so an id outside [0, depth) gives a zero row.

    ONNX OneHot is not used: it wraps ids in [-depth, -1] around to depth + id."""
    depth = _depth(b, depth_tensor, a, x.dtype)
    classes = b.op("Range", b.scalar(0, x.dtype), depth, b.scalar(1, x.dtype))
    ids = x.name
    if not a.allow_out_of_range:
        # Paddle's kernel refuses ids outside [0, depth) unless allow_out_of_range. NOTE: Paddle
        # 3.3 refuses them even then; the zero rows given then follow the attribute's documented
        # meaning (Paddle 2's kernel).
        check = IndexCheck("X", x.name, _known_depth(depth_tensor, a), size_means="the depth")
        ids = b.guard_range(x.name, x.rank, b.scalar(0, x.dtype), depth, check)
    hot = b.op("Equal", b.op("Unsqueeze", ids, b.ints([x.rank])), classes)
    out_dtype = DType(a.dtype)
    return hot if out_dtype == DType.BOOL else b.op("Cast", hot, to=ONNX_DTYPE[out_dtype])


def _known_depth(depth_tensor: Value | None, a: OneHotV2Attrs) -> int | None:
    """The depth when known at compile time (a depth fed at run time is None)."""
    if depth_tensor is None:
        return a.depth
    return None if depth_tensor.type.value is None else int(depth_tensor.type.value[0])


# onnxruntime's CPU Where has no kernel for these; the values convert exactly both ways.
_WHERE_AS: Final = {DType.BOOL: DType.UINT8, DType.INT16: DType.INT32, DType.BF16: DType.FP32}


def where(b: OnnxBuilder, condition: str, x: str, y: str, dtype: DType) -> str:
    """Where for every dtype, through a wider one where onnxruntime needs it."""
    wide = _WHERE_AS.get(dtype)
    if wide is None:
        return b.op("Where", condition, x, y)
    return b.cast(b.op("Where", condition, b.cast(x, wide), b.cast(y, wide)), dtype)


def _where_emit(b: OnnxBuilder, condition: Value, x: Value, y: Value, _a: NoAttrs) -> str:
    return where(b, condition.name, x.name, y.name, x.dtype)


def _masked_fill_emit(b: OnnxBuilder, x: Value, mask: Value, value: Value, _a: NoAttrs) -> str:
    one = b.op("Reshape", value.name, b.ints([]))  # [1] would raise a 0-D x's rank
    return where(b, mask.name, one, x.name, x.dtype)


EMITTERS: Final = {
    "masked_fill": _masked_fill_emit,
    "gather": _gather_emit,
    "index_select": _index_select_emit,
    "lookup_table_v2": _lookup_table_v2_emit,
    "one_hot_v2": _one_hot_v2_emit,
    "where": _where_emit,
}
