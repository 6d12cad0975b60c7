"""ONNX lowering of validator/ops/spatial.py: pad3d, pixel_shuffle and flip."""

from __future__ import annotations

from typing import Final

import numpy as np
from onnx import TensorProto

from executor.lower._builder import OnnxBuilder, Value
from graph_proto.types import DType
from validator.ops.resize import known_values
from validator.ops.spatial import FlipAttrs, Pad3dAttrs, PadAttrs, PixelShuffleAttrs, UnfoldAttrs

_INT64_MIN: Final = np.iinfo(np.int64).min
_ONNX_PAD_MODE: Final = {"constant": "constant", "reflect": "reflect", "replicate": "edge"}
# onnxruntime's CPU Pad has no kernel for these; the values convert exactly both ways.
_PAD_AS: Final = {DType.INT16: DType.INT32, DType.BF16: DType.FP32}


def _i64(b: OnnxBuilder, value: int) -> str:
    return b.const(np.array(value, np.int64), hint="i64")


def _dim(b: OnnxBuilder, x: Value, axis: int) -> str:
    """Dim `axis` of X as a 0-D int64."""
    return b.op("Gather", b.op("Shape", x.name), _i64(b, axis))


# --- pad3d ------------------------------------------------------------------------------------


def _pad_axes(a: Pad3dAttrs) -> tuple[int, int, int]:
    """The D, H and W axes of X; Paddle's paddings are [left, right, top, bottom, front, back],
    that is W, H, D pairs."""
    return (2, 3, 4) if a.data_format == "NCDHW" else (1, 2, 3)


def _paddle_index(a: Pad3dAttrs) -> tuple[list[int], list[int]]:
    """For each axis of X, the index into Paddle's paddings of its (before, after) amount; 6
    stands for no padding."""
    before, after = [6] * 5, [6] * 5
    for axis, (b_index, a_index) in zip(_pad_axes(a), ((4, 5), (2, 3), (0, 1)), strict=True):
        before[axis], after[axis] = b_index, a_index
    return before, after


def _static_paddings(paddings: Value | None, a: Pad3dAttrs) -> list[int] | None:
    if paddings is None:
        return list(a.paddings)
    values = known_values(paddings.type)
    return None if values is None else [int(v) for v in values]


def _onnx_pads(b: OnnxBuilder, paddings: Value | None, a: Pad3dAttrs) -> str:
    """ONNX Pad's [begin of each axis..., end of each axis...] from Paddle's paddings."""
    before, after = _paddle_index(a)
    static = _static_paddings(paddings, a)
    if static is not None:
        return b.ints([[*static, 0][i] for i in before + after])
    assert paddings is not None
    values = b.op("Concat", b.op("Cast", paddings.name, to=TensorProto.INT64), b.ints([0]), axis=0)
    return b.op("Gather", values, b.ints(before + after))


def _pad_value(b: OnnxBuilder, value: float, dtype: DType) -> str:
    """The constant as T: float attrs convert to integers by truncation, as C++ does."""
    if dtype == DType.BF16:  # numpy has no bfloat16: convert in the graph
        return b.cast(b.const(np.array(value, np.float32), hint="pad_value"), DType.BF16)
    if dtype in (DType.FP16, DType.FP32, DType.FP64):
        return b.scalar(value, dtype)
    return b.const(np.array(np.trunc(value)).astype(dtype.numpy), hint="pad_value")


def _circular(b: OnnxBuilder, x: Value, paddings: Value | None, a: Pad3dAttrs) -> str:
    """Gathers (i - before) mod size along each axis: Paddle wraps pads wider than the axis
    around as many times as needed, which Slice + Concat of one copy would not."""
    before, after = _paddle_index(a)
    static = _static_paddings(paddings, a)
    amounts = None
    if static is None:
        assert paddings is not None
        amounts = b.op("Cast", paddings.name, to=TensorProto.INT64)
    out = x.name
    for axis in _pad_axes(a):
        if static is not None:
            start, stop = _i64(b, -static[before[axis]]), _i64(b, static[after[axis]])
        else:
            assert amounts is not None
            start = b.op("Neg", b.op("Gather", amounts, _i64(b, before[axis])))
            stop = b.op("Gather", amounts, _i64(b, after[axis]))
        size = _i64(b, x.shape[axis]) if x.shape[axis] >= 0 else _dim(b, x, axis)
        index = b.op("Range", start, b.op("Add", size, stop), _i64(b, 1))
        # Max(size, 1): an empty axis must fail in Gather, not divide by zero in Mod.
        index = b.op("Mod", index, b.op("Max", size, _i64(b, 1)))
        out = b.op("Gather", out, index, axis=axis)
    return out


def _pad3d_emit(b: OnnxBuilder, x: Value, paddings: Value | None, a: Pad3dAttrs) -> str:
    if a.mode == "circular":
        return _circular(b, x, paddings, a)
    pads = _onnx_pads(b, paddings, a)
    wide = _PAD_AS.get(x.dtype)
    data = x.name if wide is None else b.cast(x.name, wide)
    if a.mode == "constant":
        value = _pad_value(b, a.value, x.dtype)
        value = value if wide is None else b.cast(value, wide)
        out = b.op("Pad", data, pads, value, mode="constant")
    else:
        # reflect: like numpy's, the edge itself is not repeated (Paddle's and ONNX's agree).
        out = b.op("Pad", data, pads, mode=_ONNX_PAD_MODE[a.mode])
    return out if wide is None else b.cast(out, x.dtype)


# --- pixel_shuffle, flip ----------------------------------------------------------------------


def _dims(b: OnnxBuilder, x: Value, axes: tuple[int, ...], factor: int = 1) -> str:
    """Dims `axes` of X times `factor`, as a 1-D int64 (constant when known)."""
    if all(x.shape[axis] >= 0 for axis in axes):
        return b.ints([x.shape[axis] * factor for axis in axes])
    dims = b.op("Gather", b.op("Shape", x.name), b.ints(list(axes)))
    return dims if factor == 1 else b.op("Mul", dims, b.ints([factor]))


def _pixel_shuffle_emit(b: OnnxBuilder, x: Value, a: PixelShuffleAttrs) -> str:
    """[n, c*r*r, h, w] viewed as [n, c, r, r, h, w] and transposed to [n, c, h, r, w, r]
    (DepthToSpace's CRD order; NHWC: [n, h, w, c, r, r] to [n, h, r, w, r, c]). Written as
    Reshape + Transpose because onnxruntime's DepthToSpace has no integer kernels."""
    r = a.upscale_factor
    nchw = a.data_format == "NCHW"
    channel_axis, hw = (1, (2, 3)) if nchw else (3, (1, 2))
    n, block = _dims(b, x, (0,)), b.ints([r, r])
    if x.shape[channel_axis] >= 0:
        c = b.ints([x.shape[channel_axis] // (r * r)])
    else:
        c = b.op("Div", _dims(b, x, (channel_axis,)), b.ints([r * r]))
    # Every dim is spelled out (allowzero): Reshape's 0 would copy a dim instead.
    view = [n, c, block, _dims(b, x, hw)] if nchw else [n, _dims(b, x, hw), c, block]
    out = [n, c, _dims(b, x, hw, r)] if nchw else [n, _dims(b, x, hw, r), c]
    viewed = b.op("Reshape", x.name, b.op("Concat", *view, axis=0), allowzero=1)
    moved = b.op("Transpose", viewed, perm=[0, 1, 4, 2, 5, 3])
    return b.op("Reshape", moved, b.op("Concat", *out, axis=0), allowzero=1)


def _flip_emit(b: OnnxBuilder, x: Value, a: FlipAttrs) -> str:
    if not a.axis:
        return b.op("Identity", x.name)
    axes = [axis % x.rank for axis in a.axis]
    n = len(axes)
    return b.op(
        "Slice", x.name, b.ints([-1] * n), b.ints([_INT64_MIN] * n), b.ints(axes), b.ints([-1] * n)
    )


def _pad_emit(b: OnnxBuilder, x: Value, a: PadAttrs) -> str:
    pads = list(a.paddings[::2]) + list(a.paddings[1::2])  # ONNX: every begin, then every end
    value = b.scalar(float(np.float32(a.pad_value)), x.dtype)  # a C++ float, cast to T
    return b.op("Pad", x.name, b.ints(pads), value, mode="constant")


_TO_THE_END: Final = np.iinfo(np.int64).max


def _unfold_emit(b: OnnxBuilder, x: Value, a: UnfoldAttrs) -> str:
    """Every kernel tap is a strided Slice of the padded X (copies, exact even for inf and nan),
    stacked in Paddle's column order: channel, then kernel row, then kernel column."""
    top, left, bottom, right = a.paddings
    padded = x.name
    if any(a.paddings):
        pads = [0, 0, top, left, 0, 0, bottom, right]
        padded = b.op("Pad", x.name, b.ints(pads), b.scalar(0.0, x.dtype), mode="constant")
    (kh, kw), (dh, dw) = a.kernel_sizes, a.dilations
    span_h, span_w = dh * (kh - 1) + 1, dw * (kw - 1) + 1
    taps = []
    for i in range(kh):
        for j in range(kw):
            # ends counted from the end, so that unknown H and W need no Shape arithmetic
            end_h = i * dh - span_h + 1 or _TO_THE_END
            end_w = j * dw - span_w + 1 or _TO_THE_END
            tap = b.op(
                "Slice",
                padded,
                b.ints([i * dh, j * dw]),
                b.ints([end_h, end_w]),
                b.ints([2, 3]),
                b.ints(list(a.strides)),
            )
            taps.append(b.op("Unsqueeze", tap, b.ints([2])))
    stacked = taps[0] if len(taps) == 1 else b.op("Concat", *taps, axis=2)
    return b.op("Reshape", stacked, _unfold_target(b, stacked))


def _unfold_target(b: OnnxBuilder, stacked: str) -> str:
    """[N, C*kh*kw, oh*ow] from the stacked taps' [N, C, kh*kw, oh, ow]."""
    shape = b.op("Shape", stacked)
    n = b.op("Slice", shape, b.ints([0]), b.ints([1]))
    columns = b.op("ReduceProd", b.op("Slice", shape, b.ints([1]), b.ints([3])), keepdims=1)
    blocks = b.op("ReduceProd", b.op("Slice", shape, b.ints([3]), b.ints([5])), keepdims=1)
    return b.op("Concat", n, columns, blocks, axis=0)


EMITTERS: Final = {
    "pad": _pad_emit,
    "unfold": _unfold_emit,
    "pad3d": _pad3d_emit,
    "pixel_shuffle": _pixel_shuffle_emit,
    "flip": _flip_emit,
}
