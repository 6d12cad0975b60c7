"""ONNX lowering of validator/ops/norm.py: batch (running statistics), layer, group and instance norm.

Half-precision inputs are normalized in float32 and cast back, as Paddle's kernels accumulate in
float32 (their MPType); optional Scale/Bias default to ones/zeros of the channel count.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Final

import numpy as np
from onnx import helper

from executor.lower._builder import ONNX_DTYPE, OnnxBuilder, Value
from executor.lower.nn import to_channel_first, to_channel_last
from graph_proto.types import DType
from validator.ops.norm import BatchNormAttrs, GroupNormAttrs, InstanceNormAttrs, LayerNormAttrs

HALF: Final = frozenset({DType.FP16, DType.BF16})


def _compute_dtype(x: Value) -> DType:
    return DType.FP32 if x.dtype in HALF else x.dtype


def _as(b: OnnxBuilder, v: Value, dtype: DType) -> str:
    return v.name if v.dtype == dtype else b.cast(v.name, dtype)


def _filled(b: OnnxBuilder, shape: str, value: float, dtype: DType) -> str:
    """A tensor of `shape` (a 1-D int64 value) holding `value`; dtype is float32 or float64."""
    tensor = helper.make_tensor("value", ONNX_DTYPE[dtype], [1], [value])
    return b.op("ConstantOfShape", shape, value=tensor)


def _param(
    b: OnnxBuilder, v: Value | None, shape: Callable[[], str], default: float, dtype: DType
) -> str:
    """`v` in `dtype`, or, when absent, `default` filled to `shape()` (built only then)."""
    return _filled(b, shape(), default, dtype) if v is None else _as(b, v, dtype)


def _dim_vector(b: OnnxBuilder, name: str, known: tuple[int, ...], start: int, end: int) -> str:
    """Dims [start, end) of value `name` as a 1-D int64 value (a constant when known)."""
    dims = known[start:end]
    if all(d >= 0 for d in dims):
        return b.ints(dims)
    return b.op("Shape", name, start=start, end=end)


def _restore(b: OnnxBuilder, y: str, x: Value, last: bool = False) -> str:
    y = to_channel_last(b, y, last, x.rank)
    return y if _compute_dtype(x) == x.dtype else b.cast(y, x.dtype)


def _channels_first(b: OnnxBuilder, x: Value, last: bool) -> tuple[str, tuple[int, ...]]:
    """x in the compute dtype with channels on axis 1, and its inferred dims in that layout."""
    xc = _as(b, x, _compute_dtype(x))
    shape = x.shape
    if last:
        shape = (shape[0], shape[-1], *shape[1:-1])
    return to_channel_first(b, xc, last, x.rank), shape


def _batch_norm_emit(
    b: OnnxBuilder,
    x: Value,
    scale: Value | None,
    bias: Value | None,
    mean: Value,
    variance: Value,
    _momentum: Value | None,
    a: BatchNormAttrs,
) -> str:
    # The rule admits only inference mode: normalize by the running Mean and Variance.
    last, dtype = a.data_layout == "NHWC", _compute_dtype(x)
    xs, _ = _channels_first(b, x, last)
    channels = partial(_dim_vector, b, mean.name, mean.shape, 0, 1)
    y = b.op(
        "BatchNormalization",
        xs,
        _param(b, scale, channels, 1.0, dtype),
        _param(b, bias, channels, 0.0, dtype),
        _as(b, mean, dtype),
        _as(b, variance, dtype),
        epsilon=a.epsilon,
    )
    return _restore(b, y, x, last)


def _layer_norm_emit(
    b: OnnxBuilder, x: Value, scale: Value | None, bias: Value | None, a: LayerNormAttrs
) -> str:
    # NOTE: Paddle's Scale and Bias are flat ([prod of the normalized dims]); ONNX wants them
    # shaped as the normalized dims.
    dtype, axis = _compute_dtype(x), a.begin_norm_axis
    xc = _as(b, x, dtype)
    normalized = partial(_dim_vector, b, xc, x.shape, axis, x.rank)
    params = [_param(b, scale, normalized, 1.0, dtype)]
    if bias is not None:
        params.append(_as(b, bias, dtype))
    if x.rank - axis > 1:
        shape = normalized()
        params = [b.op("Reshape", p, shape) for p in params]
    y = b.op("LayerNormalization", xc, *params, axis=axis, epsilon=a.epsilon)
    return _restore(b, y, x)


def _affine(
    b: OnnxBuilder, y: str, scale: Value | None, bias: Value | None, dtype: DType, rank: int
) -> str:
    """Per-channel (axis 1) scale and shift."""
    for v, op_type in ((scale, "Mul"), (bias, "Add")):
        if v is not None:
            param = _as(b, v, dtype)
            if rank > 2:
                param = b.op("Unsqueeze", param, b.ints(list(range(1, rank - 1))))
            y = b.op(op_type, y, param)
    return y


def _group_norm_emit(
    b: OnnxBuilder, x: Value, scale: Value | None, bias: Value | None, a: GroupNormAttrs
) -> str:
    # ONNX 17 has no GroupNormalization: instance-normalize [N, groups, rest], then scale and
    # shift per channel.
    last, dtype = a.data_layout == "NHWC", _compute_dtype(x)
    xs, shape = _channels_first(b, x, last)
    grouped = b.op("Reshape", xs, b.ints([0, a.groups, -1]))
    groups = b.ints([a.groups])
    normed = b.op(
        "InstanceNormalization",
        grouped,
        _filled(b, groups, 1.0, dtype),
        _filled(b, groups, 0.0, dtype),
        epsilon=a.epsilon,
    )
    y = b.op("Reshape", normed, _dim_vector(b, xs, shape, 0, x.rank))
    return _restore(b, _affine(b, y, scale, bias, dtype, x.rank), x, last)


def _instance_norm_emit(
    b: OnnxBuilder, x: Value, scale: Value | None, bias: Value | None, a: InstanceNormAttrs
) -> str:
    dtype = _compute_dtype(x)
    xc = _as(b, x, dtype)
    if x.rank == 2:
        return _restore(b, _single_element_norm(b, xc, scale, bias, dtype, a.epsilon), x)
    channels = partial(_dim_vector, b, xc, x.shape, 1, 2)
    y = b.op(
        "InstanceNormalization",
        xc,
        _param(b, scale, channels, 1.0, dtype),
        _param(b, bias, channels, 0.0, dtype),
        epsilon=a.epsilon,
    )
    return _restore(b, y, x)


def _single_element_norm(
    b: OnnxBuilder, x: str, scale: Value | None, bias: Value | None, dtype: DType, eps: float
) -> str:
    """instance_norm of [N, C]: each element is its own mean, with variance 0, so Paddle gives
    (x - x) / sqrt(epsilon) * Scale + Bias, exactly Bias (NaN for epsilon 0 or x inf/NaN)."""
    inv_std = b.op("Reciprocal", b.op("Sqrt", b.const(np.asarray(eps, dtype.numpy))))
    y = b.op("Mul", b.op("Sub", x, x), inv_std)
    return _affine(b, y, scale, bias, dtype, rank=2)


EMITTERS: Final = {
    "batch_norm": _batch_norm_emit,
    "layer_norm": _layer_norm_emit,
    "group_norm": _group_norm_emit,
    "instance_norm": _instance_norm_emit,
}
