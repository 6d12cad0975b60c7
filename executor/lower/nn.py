"""ONNX lowering of validator/ops/nn.py: convolutions, and the run-time window arithmetic that
pooling shares (pads and output sizes as ints, or as ONNX int64 values when dims are unknown)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from executor.lower._builder import OnnxBuilder, Value
from graph_proto.types import DType
from validator.ops.nn import ConvAttrs, ConvTransposeAttrs, layout, resolve_pads


@dataclass(frozen=True, slots=True)
class RunDim:
    """A dim known only at run time: an int64 [1] ONNX value. + - * and // (on non-negative
    values only: ONNX Div truncates) emit nodes, so one formula serves ints and run-time dims."""

    b: OnnxBuilder
    name: str

    def _bin(self, op_type: str, other: Dim, swap: bool = False) -> RunDim:
        o = other.name if isinstance(other, RunDim) else self.b.ints([other])
        lhs, rhs = (o, self.name) if swap else (self.name, o)
        return RunDim(self.b, self.b.op(op_type, lhs, rhs))

    def __add__(self, other: Dim) -> RunDim:
        return self._bin("Add", other)

    def __radd__(self, other: int) -> RunDim:
        return self._bin("Add", other, swap=True)

    def __sub__(self, other: Dim) -> RunDim:
        return self._bin("Sub", other)

    def __rsub__(self, other: int) -> RunDim:
        return self._bin("Sub", other, swap=True)

    def __mul__(self, other: Dim) -> RunDim:
        return self._bin("Mul", other)

    def __rmul__(self, other: int) -> RunDim:
        return self._bin("Mul", other, swap=True)

    def __floordiv__(self, other: Dim) -> RunDim:
        return self._bin("Div", other)


Dim = int | RunDim


def _extreme(x: Dim, y: Dim, op_type: str) -> Dim:
    if isinstance(x, int) and isinstance(y, int):
        return max(x, y) if op_type == "Max" else min(x, y)
    run, other = (x, y) if isinstance(x, RunDim) else (y, x)
    assert isinstance(run, RunDim)
    return run._bin(op_type, other)


def dmax(x: Dim, y: Dim) -> Dim:
    return _extreme(x, y, "Max")


def dmin(x: Dim, y: Dim) -> Dim:
    return _extreme(x, y, "Min")


def dim(b: OnnxBuilder, name: str, axis: int, known: int) -> Dim:
    """Dim `axis` of value `name`: the inferred size, or a Shape slice when it is unknown (-1)."""
    return known if known >= 0 else RunDim(b, b.op("Shape", name, start=axis, end=axis + 1))


def dims_vector(b: OnnxBuilder, dims: Sequence[Dim]) -> str:
    """A 1-D int64 value of the dims (a constant when all are known)."""
    if all(isinstance(d, int) for d in dims):
        return b.ints([d for d in dims if isinstance(d, int)])
    parts = [d.name if isinstance(d, RunDim) else b.ints([d]) for d in dims]
    return b.op("Concat", *parts, axis=0)


def same_pads(size: Dim, stride: int, kernel: Dim) -> tuple[Dim, Dim]:
    """Paddle's SAME padding (output ceil(size / stride), the odd one after), as resolve_pads."""
    out = (size + stride - 1) // stride
    total = dmax((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def float_const(b: OnnxBuilder, value: float | np.ndarray, dtype: DType) -> str:
    """A float constant of `dtype`; bfloat16 (no numpy dtype) is cast from float32."""
    if dtype == DType.BF16:
        return b.cast(b.const(np.asarray(value, np.float32)), dtype)
    return b.const(np.asarray(value, dtype.numpy))


def spatial(b: OnnxBuilder, x_nchw: str, known: Sequence[int]) -> list[Dim]:
    return [dim(b, x_nchw, 2 + i, d) for i, d in enumerate(known)]


def to_channel_first(b: OnnxBuilder, name: str, last: bool, rank: int = 4) -> str:
    """NHWC (any rank >= 3: channels last) becomes NCHW for the ONNX op; ORT's transpose
    optimizer cancels the pairs this leaves between consecutive channel-last ops."""
    if not last:
        return name
    return b.op("Transpose", name, perm=[0, rank - 1, *range(1, rank - 1)])


def to_channel_last(b: OnnxBuilder, name: str, last: bool, rank: int = 4) -> str:
    if not last:
        return name
    return b.op("Transpose", name, perm=[0, *range(2, rank), 1])


def _dilations(a: ConvAttrs) -> list[int]:
    # NOTE: Paddle drops the dilations under SAME padding (UpdatePaddingAndDilation).
    return [1, 1] if a.padding_algorithm == "SAME" else list(a.dilations)


def _conv_pads(x: Value, w: Value, a: ConvAttrs) -> dict[str, object]:
    """Conv's pads attribute ([top, left, bottom, right]), or SAME_UPPER when the sizes are
    unknown: ONNX's SAME_UPPER is Paddle's SAME (ceil(size / stride), the odd pad after)."""
    sizes = layout(x.shape, a.data_format == "NHWC")[2]
    kernel = w.shape[2:]
    if a.padding_algorithm == "SAME" and min(*sizes, *kernel) < 0:
        return {"auto_pad": "SAME_UPPER"}
    (t, bottom), (left, r) = resolve_pads(a, sizes, a.strides, kernel)
    return {"pads": [t, left, bottom, r]}


def _conv2d_emit(b: OnnxBuilder, x: Value, w: Value, a: ConvAttrs) -> str:
    last = a.data_format == "NHWC"
    y = b.op(
        "Conv",
        to_channel_first(b, x.name, last),
        w.name,
        strides=list(a.strides),
        dilations=_dilations(a),
        group=a.groups,
        **_conv_pads(x, w, a),
    )
    return to_channel_last(b, y, last)


def _transpose_window(
    b: OnnxBuilder, full: str, xs: str, x: Value, w: Value, a: ConvTransposeAttrs
) -> tuple[list[Dim], list[Dim], list[Dim]]:
    """Per spatial axis of the unpadded ConvTranspose result `full`: where Paddle's output
    starts (the leading pad), its length, and the length of `full`."""
    sizes = spatial(b, xs, layout(x.shape, a.data_format == "NHWC")[2])
    kernel = [dim(b, w.name, 2 + i, w.shape[2 + i]) for i in range(2)]
    dilations = _dilations(a)
    starts: list[Dim] = []
    lengths: list[Dim] = []
    fulls: list[Dim] = []
    for i, (size, k, s) in enumerate(zip(sizes, kernel, a.strides, strict=True)):
        if isinstance(size, int) and isinstance(k, int):
            fulls.append((size - 1) * s + dilations[i] * (k - 1) + 1)
        else:
            fulls.append(dim(b, full, 2 + i, -1))
        if a.padding_algorithm == "SAME":
            p0, p1 = same_pads(size, s, k)
        else:
            p0, p1 = resolve_pads(a, (0, 0), a.strides, (0, 0))[i]
        extra = a.output_padding[i] if a.output_padding else 0
        starts.append(p0)
        lengths.append(a.output_size[i] if a.output_size else fulls[i] - p0 - p1 + extra)
    return starts, lengths, fulls


def _conv2d_transpose_emit(
    b: OnnxBuilder, x: Value, w: Value, _bias: Value | None, a: ConvTransposeAttrs
) -> str:
    # NOTE: ConvTranspose runs unpadded; Paddle's output is the window [pad_before, pad_before +
    # size) of that result, zeros past its end (output_padding, output_size). Cropping with
    # Slice keeps asymmetric and run-time (SAME) pads exact on every provider.
    last = a.data_format == "NHWC"
    xs = to_channel_first(b, x.name, last)
    full = b.op(
        "ConvTranspose",
        xs,
        w.name,
        strides=list(a.strides),
        dilations=_dilations(a),
        group=a.groups,
    )
    starts, lengths, fulls = _transpose_window(b, full, xs, x, w, a)
    ends = [s + n for s, n in zip(starts, lengths, strict=True)]
    short = [dmax(e - f, 0) for e, f in zip(ends, fulls, strict=True)]
    if any(d != 0 for d in short):
        zero = float_const(b, 0.0, x.dtype)
        full = b.op("Pad", full, dims_vector(b, [0, 0, 0, 0, 0, 0, *short]), zero)
    if starts == [0, 0] and ends == fulls:
        return to_channel_last(b, full, last)
    y = b.op("Slice", full, dims_vector(b, starts), dims_vector(b, ends), b.ints([2, 3]))
    return to_channel_last(b, y, last)


EMITTERS: Final = {
    "conv2d": _conv2d_emit,
    "depthwise_conv2d": _conv2d_emit,
    "conv2d_transpose": _conv2d_transpose_emit,
    "depthwise_conv2d_transpose": _conv2d_transpose_emit,
}
