"""ONNX lowering of validator/ops/resize.py: Paddle's CPU interpolation kernels replayed with Gather.

ONNX Resize cannot reproduce Paddle exactly in general:
- Paddle maps output index k to the source coordinate `ratio * k` multiplied in float32, where
  ratio = float32(1 / scale) whenever a scale is given (even when OutSize overrides the size it
  implies) and float32(in / out) otherwise; onnxruntime computes `k / (out / in)`, which rounds
  differently, so truncating gives another source row at integer boundaries.
- Paddle copies X untouched when every output size equals its input size, even if a scale such
  as 1.05 says otherwise.
- Bilinear blends the four corners in a fixed float32 order and then converts to T, which
  truncates for uint8 (a flat image of 3s can give 2s).
So source indices and weights are computed in the graph with Paddle's own float32/float64 steps
(onnxruntime folds them to constants when the sizes are static), then gathered axis by axis.

Except where one ONNX Resize samples exactly the same points: a float32 NCHW bilinear resize
whose sizes are known when lowering and whose ratio follows from them and is a power of
two (x2, x4, x1/8: the upsampling of segmentation heads) is one Resize, in one pass over the
output where the gathers and blends make ~15 (see _resize_samples_alike).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
from onnx import TensorProto, helper

from executor.lower._builder import ONNX_DTYPE, OnnxBuilder, Value
from executor.lower._int_lists import concat_ints, dims
from graph_proto.types import DType
from validator.ops.resize import InterpAttrs, known_values

_FLOAT: Final = TensorProto.FLOAT
_DOUBLE: Final = TensorProto.DOUBLE
_INT64: Final = TensorProto.INT64


@dataclass(frozen=True, slots=True)
class _Axis:
    """One resampled axis: its position in X, input and output sizes (0-D int64 names, with the
    static value when known) and the scale Paddle derives the ratio from (0-D float32 or float64,
    or None)."""

    axis: int
    size_in: str
    size_out: str
    static_in: int | None
    static_out: int | None
    scale: str | None


def _i64(b: OnnxBuilder, value: int) -> str:
    return b.const(np.array(value, np.int64), hint="i64")


def _f32(b: OnnxBuilder, value: float) -> str:
    return b.const(np.array(value, np.float32), hint="f32")


def _f64(b: OnnxBuilder, value: float) -> str:
    return b.const(np.array(value, np.float64), hint="f64")


def _input_size(b: OnnxBuilder, x: Value, axis: int) -> str:
    if x.shape[axis] >= 0:
        return _i64(b, x.shape[axis])
    return b.op("Gather", b.op("Shape", x.name), _i64(b, axis))


def _element(b: OnnxBuilder, t: Value, index: int, onnx_type: int) -> tuple[str, int | None]:
    """Element `index` of a small size or scale tensor (0-D), and its value when known."""
    values = known_values(t.type) if onnx_type == _INT64 else None
    if values is not None:
        return _i64(b, int(values[index])), int(values[index])
    flat = b.op("Reshape", b.op("Cast", t.name, to=onnx_type), b.ints([-1]))
    return b.op("Gather", flat, _i64(b, index)), None


def _scale_element(b: OnnxBuilder, scale: Value, i: int) -> str:
    """Scale[i], or Scale[0] for all axes when it holds one value (as Paddle reads it)."""
    if scale.shape[0] >= 0:
        return _element(b, scale, i if scale.shape[0] != 1 else 0, _FLOAT)[0]
    last = b.op("Sub", b.op("Size", scale.name), _i64(b, 1))  # 1 or len(axes) values
    return b.op("Gather", b.op("Reshape", scale.name, b.ints([-1])), b.op("Min", _i64(b, i), last))


def _axes(
    b: OnnxBuilder,
    x: Value,
    out_size: Value | None,
    size_tensor: tuple[Value, ...] | None,
    scale_tensor: Value | None,
    a: InterpAttrs,
) -> list[_Axis]:
    """Sizes and scales in the order Paddle's kernel takes them: SizeTensor (no scale), else the
    Scale tensor or scale attr, whose sizes OutSize then overrides (the scale still sets the
    ratio), else out_d/out_h/out_w."""
    spatial = range(1, x.rank - 1) if a.data_layout == "NHWC" else range(2, x.rank)
    attrs = (a.out_d, a.out_h, a.out_w)[-len(spatial) :]
    axes = []
    for i, axis in enumerate(spatial):
        size_in = _input_size(b, x, axis)
        static_in = x.shape[axis] if x.shape[axis] >= 0 else None
        scale: str | None = None
        static_scale: float | None = None
        if size_tensor:
            size_out, static_out = _element(b, size_tensor[i], 0, _INT64)
        else:
            if scale_tensor is not None:
                scale = _scale_element(b, scale_tensor, i)
            elif a.scale:
                # As the program carries it: float32 values (FLOATS) or PIR's doubles (FLOAT64S).
                static_scale = float(a.scale[i])
                scale = _f64(b, static_scale)
            if out_size is not None:
                size_out, static_out = _element(b, out_size, i, _INT64)
            elif scale is not None:
                size_out = _scaled(b, size_in, scale)
                static_out = None
                if static_in is not None and static_scale is not None:
                    static_out = int(static_in * static_scale)  # a double product, as below
            else:
                size_out, static_out = _i64(b, attrs[i]), attrs[i]
        axes.append(_Axis(axis, size_in, size_out, static_in, static_out, scale))
    return axes


def _scaled(b: OnnxBuilder, size_in: str, scale: str) -> str:
    """int(in * scale) with the product in double, as Paddle 3's kernel computes it.

    NOTE: Paddle's compile-time rule multiplies in float32 and can record one more (10 * 0.9f
    records 9 where the kernel gives 8); the run-time size is the one computed here."""
    product = b.op("Mul", b.op("Cast", size_in, to=_DOUBLE), b.op("Cast", scale, to=_DOUBLE))
    return b.op("Cast", b.op("Floor", product), to=_INT64)


def _unchanged(b: OnnxBuilder, axes: Sequence[_Axis]) -> bool | str:
    """Whether every output size equals its input size (Paddle then copies X): a bool when
    known statically, else a 0-D bool name."""
    if all(ax.static_in is not None and ax.static_out is not None for ax in axes):
        return all(ax.static_in == ax.static_out for ax in axes)
    same = b.op("Equal", axes[0].size_in, axes[0].size_out)
    for ax in axes[1:]:
        same = b.op("And", same, b.op("Equal", ax.size_in, ax.size_out))
    return same


def _ratio(b: OnnxBuilder, ax: _Axis, align_corners: bool) -> str:
    """Paddle's float32 ratio: 0 for a single output, (in-1)/(out-1) with align_corners,
    float32(1. / scale) (a double division) with a scale, else in/out."""
    if align_corners:
        num = b.op("Cast", b.op("Sub", ax.size_in, _i64(b, 1)), to=_FLOAT)
        den = b.op("Cast", b.op("Sub", ax.size_out, _i64(b, 1)), to=_FLOAT)
        ratio = b.op("Div", num, den)
    elif ax.scale is not None:
        inverse = b.op("Div", _f64(b, 1.0), b.op("Cast", ax.scale, to=_DOUBLE))
        ratio = b.op("Cast", inverse, to=_FLOAT)
    else:
        num = b.op("Cast", ax.size_in, to=_FLOAT)
        ratio = b.op("Div", num, b.op("Cast", ax.size_out, to=_FLOAT))
    return b.op("Where", b.op("Greater", ax.size_out, _i64(b, 1)), ratio, _f32(b, 0.0))


def _positions(b: OnnxBuilder, ax: _Axis) -> tuple[str, str]:
    """k = 0..out-1 as int64 and as float32."""
    k = b.op("Range", _i64(b, 0), ax.size_out, _i64(b, 1))
    return k, b.op("Cast", k, to=_FLOAT)


def _last(b: OnnxBuilder, ax: _Axis) -> str:
    return b.op("Sub", ax.size_in, _i64(b, 1))


def _nearest_index(b: OnnxBuilder, ax: _Axis, a: InterpAttrs, same: str | None) -> str:
    k, k_float = _positions(b, ax)
    source = b.op("Mul", _ratio(b, ax, a.align_corners), k_float)  # float32, as Paddle
    if a.align_corners:
        # static_cast<int>(ratio * k + 0.5): the float32 product plus a double 0.5.
        source = b.op("Add", b.op("Cast", source, to=_DOUBLE), _f64(b, 0.5))
    index = b.op("Cast", b.op("Floor", source), to=_INT64)  # >= 0: truncation is floor
    # Only an OutSize larger than the scale implies reaches past the end (Paddle reads out of
    # bounds there); the last row is taken instead.
    index = b.op("Min", index, _last(b, ax))
    return index if same is None else b.op("Where", same, k, index)


def _nearest_interp_v2_emit(
    b: OnnxBuilder,
    x: Value,
    out_size: Value | None,
    size_tensor: tuple[Value, ...] | None,
    scale_tensor: Value | None,
    a: InterpAttrs,
) -> str:
    axes = _axes(b, x, out_size, size_tensor, scale_tensor, a)
    same = _unchanged(b, axes)
    if same is True:
        return b.op("Identity", x.name)
    out = x.name
    for ax in axes:
        index = _nearest_index(b, ax, a, same if isinstance(same, str) else None)
        out = b.op("Gather", out, index, axis=ax.axis)
    return out


def _bilinear_taps(b: OnnxBuilder, ax: _Axis, a: InterpAttrs, rows: bool) -> tuple[str, str, str]:
    """(low index, high index, float32 weight of high) along one axis, as Paddle's kernel."""
    k, k_float = _positions(b, ax)
    ratio = _ratio(b, ax, a.align_corners)
    if a.align_mode == 0 and not a.align_corners:
        # ratio * (k + 0.5) - 0.5 clamped at 0. NOTE: Paddle 3.3's CPU kernel evaluates it in
        # double along H (then rounds the weight to float32) but in float32 along W; both were
        # matched bit for bit against it.
        if rows:
            k_double = b.op("Add", b.op("Cast", k, to=_DOUBLE), _f64(b, 0.5))
            scaled = b.op("Mul", b.op("Cast", ratio, to=_DOUBLE), k_double)
            source = b.op("Sub", scaled, _f64(b, 0.5))
            position = b.op("Max", b.op("Cast", source, to=_FLOAT), _f32(b, 0.0))
        else:
            half = _f32(b, 0.5)
            source = b.op("Sub", b.op("Mul", ratio, b.op("Add", k_float, half)), half)
            position = b.op("Max", source, _f32(b, 0.0))
        low = b.op("Max", b.op("Cast", b.op("Floor", source), to=_INT64), _i64(b, 0))
    else:
        position = b.op("Mul", ratio, k_float)
        low = b.op("Cast", b.op("Floor", position), to=_INT64)
    weight = b.op("Sub", position, b.op("Cast", low, to=_FLOAT))
    low = b.op("Min", low, _last(b, ax))  # as for nearest: only OutSize past the scale reaches it
    high = b.op("Min", b.op("Add", low, _i64(b, 1)), _last(b, ax))
    return low, high, weight


def _resize_samples_alike(
    x: Value,
    axes: Sequence[_Axis],
    scale_tensor: Value | None,
    out_size: Value | None,
    a: InterpAttrs,
) -> bool:
    """Whether one ONNX Resize samples exactly where Paddle's kernel does.

    onnxruntime derives its ratio from the sizes (out / in, in float32); Paddle from a scale
    when one is given (1 / scale, even when OutSize overrides the size it implies), else from
    the sizes (in / out, or (in - 1) / (out - 1) with align_corners). The two name the same
    ratio when it ignores the scale, when there is none, or when whole-number scales make
    out = in * scale. Where that ratio is a power of two (or one output), both compute every
    source coordinate without rounding, so they pick the same rows with the same weights;
    other ratios round differently (a weight off by 1e-5 at coordinates in the hundreds)."""
    if x.dtype != DType.FP32 or scale_tensor is not None or not _resizes_last_two(x, axes):
        return False
    scale_sets_ratio = bool(a.scale) and not a.align_corners
    if scale_sets_ratio and (
        out_size is not None or not all(float(s).is_integer() for s in a.scale)
    ):
        return False
    return all(_exact_ratio(ax, a.align_corners) for ax in axes)


def _resizes_last_two(x: Value, axes: Sequence[_Axis]) -> bool:
    """Whether X is 4-D and the axes are its last two (NCHW): the linear Resize every
    onnxruntime provider has (CUDA's takes 2-D, 4-D NCHW and 5-D, not NHWC or 3-D)."""
    return x.rank == 4 and [ax.axis for ax in axes] == [2, 3]


def _exact_ratio(ax: _Axis, align_corners: bool) -> bool:
    """Whether the axis' sizes are known and one is the other times a power of two."""
    if ax.static_in is None or ax.static_out is None:
        return False
    size_in, size_out = ax.static_in, ax.static_out
    if align_corners:
        size_in, size_out = size_in - 1, size_out - 1
    if size_out <= 1 or size_in == 0:  # one output (or one input row): row 0 in both
        return True
    big, small = max(size_in, size_out), min(size_in, size_out)
    ratio, rest = divmod(big, small)
    return rest == 0 and ratio & (ratio - 1) == 0


def _coordinate_mode(a: InterpAttrs) -> str:
    """Resize's name for Paddle's source coordinate (row 0 for one output in every mode)."""
    if a.align_corners:
        return "align_corners"  # k * (in - 1) / (out - 1)
    if a.align_mode == 0:
        return "pytorch_half_pixel"  # (k + 0.5) * ratio - 0.5, clamped at 0
    return "asymmetric"  # k * ratio


def _resize(b: OnnxBuilder, x: Value, axes: Sequence[_Axis], a: InterpAttrs) -> str:
    """One linear ONNX Resize of NCHW X to the axes' (known) output sizes."""
    sizes = [ax.static_out for ax in axes if ax.static_out is not None]
    target = concat_ints(b, [dims(b, x, 0, 2), sizes])
    mode = _coordinate_mode(a)
    return b.op(
        "Resize", x.name, "", "", target, mode="linear", coordinate_transformation_mode=mode
    )


def _broadcast(b: OnnxBuilder, weight: str, axis: int, rank: int, dtype: int) -> str:
    """A weight along `axis` shaped to broadcast against the trailing dims of X."""
    if dtype != _FLOAT:
        weight = b.op("Cast", weight, to=dtype)
    trailing = rank - 1 - axis
    if trailing == 0:
        return weight
    return b.op("Unsqueeze", weight, b.ints(list(range(1, trailing + 1))))


def _bilinear_interp_v2_emit(
    b: OnnxBuilder,
    x: Value,
    out_size: Value | None,
    size_tensor: tuple[Value, ...] | None,
    scale_tensor: Value | None,
    a: InterpAttrs,
) -> str:
    axes = _axes(b, x, out_size, size_tensor, scale_tensor, a)
    same = _unchanged(b, axes)
    if same is True:
        return b.op("Identity", x.name)
    if _resize_samples_alike(x, axes, scale_tensor, out_size, a):
        return _resize(b, x, axes, a)  # known sizes that differ
    # T * float runs in float (double for T = double); the sum converts back to T.
    compute = _DOUBLE if x.dtype == DType.FP64 else _FLOAT
    data = x.name if x.dtype in (DType.FP32, DType.FP64) else b.op("Cast", x.name, to=compute)
    h, w = axes
    low_h, high_h, d_n = _bilinear_taps(b, h, a, rows=True)
    low_w, high_w, d_w = _bilinear_taps(b, w, a, rows=False)
    north = b.op("Gather", data, low_h, axis=h.axis)
    south = b.op("Gather", data, high_h, axis=h.axis)
    d_s = b.op("Sub", _f32(b, 1.0), d_n)
    d_e = b.op("Sub", _f32(b, 1.0), d_w)
    d_n, d_s = (_broadcast(b, d, h.axis, x.rank, compute) for d in (d_n, d_s))
    d_w, d_e = (_broadcast(b, d, w.axis, x.rank, compute) for d in (d_w, d_e))
    # Paddle's order: nw*d_s*d_e + sw*d_n*d_e + ne*d_s*d_w + se*d_n*d_w, left to right.
    terms = [
        b.op("Mul", b.op("Mul", b.op("Gather", rows, cols, axis=w.axis), wh), ww)
        for cols, ww in ((low_w, d_e), (high_w, d_w))
        for rows, wh in ((north, d_s), (south, d_n))
    ]
    out = b.op("Add", b.op("Add", b.op("Add", terms[0], terms[1]), terms[2]), terms[3])
    if x.dtype not in (DType.FP32, DType.FP64):
        out = b.op("Cast", out, to=ONNX_DTYPE[x.dtype])  # truncates for uint8, as C++ does
    return _copy_if(b, same, x, out) if isinstance(same, str) else out


def _copy_if(b: OnnxBuilder, same: str, x: Value, blended: str) -> str:
    """X itself when `same` holds at run time (Paddle copies; blending would turn inf into NaN)."""
    branches = []
    for source in (x.name, blended):
        out = b.fresh("branch")
        node = helper.make_node("Identity", [source], [out], name=b.fresh("node_Identity"))
        info = helper.make_tensor_value_info(out, ONNX_DTYPE[x.dtype], None)
        branches.append(helper.make_graph([node], b.fresh("branch"), [], [info]))
    return b.op("If", same, then_branch=branches[0], else_branch=branches[1])


def _linear_interp_v2_emit(
    b: OnnxBuilder,
    x: Value,
    out_size: Value | None,
    size_tensor: tuple[Value, ...] | None,
    scale_tensor: Value | None,
    a: InterpAttrs,
) -> str:
    (w,) = _axes(b, x, out_size, size_tensor, scale_tensor, a)
    same = _unchanged(b, [w])
    if same is True:
        return b.op("Identity", x.name)
    compute = _DOUBLE if x.dtype == DType.FP64 else _FLOAT
    data = x.name if x.dtype in (DType.FP32, DType.FP64) else b.op("Cast", x.name, to=compute)
    # Paddle's linear kernel takes ratio * (l + 0.5) in double, as bilinear does along H.
    low, high, d_w = _bilinear_taps(b, w, a, rows=True)
    d_e = _broadcast(b, b.op("Sub", _f32(b, 1.0), d_w), w.axis, x.rank, compute)
    d_w = _broadcast(b, d_w, w.axis, x.rank, compute)
    west = b.op("Mul", b.op("Gather", data, low, axis=w.axis), d_e)
    out = b.op("Add", west, b.op("Mul", b.op("Gather", data, high, axis=w.axis), d_w))
    if x.dtype not in (DType.FP32, DType.FP64):
        out = b.op("Cast", out, to=ONNX_DTYPE[x.dtype])
    return _copy_if(b, same, x, out) if isinstance(same, str) else out


EMITTERS: Final = {
    "linear_interp_v2": _linear_interp_v2_emit,
    "nearest_interp_v2": _nearest_interp_v2_emit,
    "bilinear_interp_v2": _bilinear_interp_v2_emit,
}
