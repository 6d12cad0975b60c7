"""ONNX lowering of validator/ops/index.py: gather, index_select, lookup_table_v2, one_hot_v2, where.

Negative indices wrap in gather and index_select (Paddle 3 and ONNX Gather agree); an index past
the end fails in both.
"""

from __future__ import annotations

from typing import Final

import numpy as np
from onnx import TensorProto, helper

from executor.lower._builder import ONNX_DTYPE, OnnxBuilder, Value
from graph_proto.types import DType
from validator.ops._def import NoAttrs
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
    return b.op("Gather", x.name, _flat_index(b, index), axis=axis % x.rank)


def _index_select_emit(b: OnnxBuilder, x: Value, index: Value, a: IndexSelectAttrs) -> str:
    return b.op("Gather", x.name, _flat_index(b, index), axis=a.dim % x.rank)


def _zero(b: OnnxBuilder, dtype: DType) -> str:
    if dtype == DType.BF16:  # numpy has no bfloat16: convert in the graph
        return b.cast(b.const(np.array(0, np.float32), hint="zero"), dtype)
    return b.scalar(0, dtype)


def _lookup_table_v2_emit(b: OnnxBuilder, w: Value, ids: Value, a: LookupTableV2Attrs) -> str:
    rows = b.op("Gather", w.name, ids.name, axis=0)
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
    ids = b.op("Unsqueeze", x.name, b.ints([x.rank]))
    hot = b.op("Equal", ids, classes)
    if not a.allow_out_of_range:
        hot = b.op("Or", hot, _out_of_range_guard(b, x.name, x.dtype, depth))
    out_dtype = DType(a.dtype)
    return hot if out_dtype == DType.BOOL else b.op("Cast", hot, to=ONNX_DTYPE[out_dtype])


def _out_of_range_guard(b: OnnxBuilder, x: str, dtype: DType, depth: str) -> str:
    """All false, but Gather fails when an id is outside [0, depth): Paddle's kernel refuses
    such ids unless allow_out_of_range.

    NOTE: Paddle 3.3 refuses them even with allow_out_of_range; the zero rows given then follow
    the attribute's documented meaning (Paddle 2's kernel)."""
    negative = b.op("Less", x, b.scalar(0, dtype))
    index = b.op("Where", negative, depth, x)  # -1 would wrap to the last class: send it past
    count = b.op("Reshape", b.op("Cast", depth, to=TensorProto.INT64), b.ints([1]))
    falses = b.op(
        "ConstantOfShape", count, value=helper.make_tensor("", TensorProto.BOOL, [1], [False])
    )
    return b.op("Unsqueeze", b.op("Gather", falses, index, axis=0), b.ints([-1]))


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


EMITTERS: Final = {
    "gather": _gather_emit,
    "index_select": _index_select_emit,
    "lookup_table_v2": _lookup_table_v2_emit,
    "one_hot_v2": _one_hot_v2_emit,
    "where": _where_emit,
}
