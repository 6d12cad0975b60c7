"""ONNX lowering of validator/ops/pool.py: pool2d with Paddle's windows, counts and adaptive bins.

ONNX pools run on an explicitly padded input (or with symmetric pads where those give the same
windows), so that the window positions, the output count (Paddle's truncating ceil_mode) and the
divisor are Paddle's on every provider.
"""

from __future__ import annotations

from typing import Final

import numpy as np
from onnx import TensorProto, helper

from executor.lower._builder import OnnxBuilder, Value
from executor.lower.nn import (
    Dim,
    RunDim,
    dims_vector,
    dmax,
    dmin,
    float_const,
    same_pads,
    spatial,
    to_channel_first,
    to_channel_last,
)
from graph_proto.types import DType
from validator.ops.nn import layout, resolve_pads
from validator.ops.pool import Pool2dAttrs

FLT_MAX: Final = float(np.finfo(np.float32).max)
POOL: Final = {"max": "MaxPool", "avg": "AveragePool"}
GLOBAL_POOL: Final = {"max": "GlobalMaxPool", "avg": "GlobalAveragePool"}
# Per spatial axis: (ones, zeros before, zeros after) of a divisor mask.
MaskPlan = list[tuple[Dim, Dim, Dim]]


def _lowest(dtype: DType) -> float:
    # NOTE: Paddle's max starts from -FLT_MAX (-inf in half precision); padding gives the same.
    return -FLT_MAX if dtype in (DType.FP32, DType.FP64) else -np.inf


def _window_pads(size: Dim, k: int, s: int, pads: tuple[Dim, Dim], ceil: bool) -> tuple[Dim, Dim]:
    """(before, after) padding that makes an unpadded ONNX pool give Paddle's windows."""
    p0, p1 = pads
    span = size + p0 + p1 - k + (s - 1 if ceil else 0)
    # NOTE: Paddle truncates span / stride toward zero: a window up to stride - 1 longer than the
    # padded input still gives one output (span >= 1 - stride, checked by the rule).
    out = dmax(span, 0) // s + 1
    # The last window may end past the padded input (ceil_mode, truncation) or before it (then
    # the rest is never read); pad exactly to its end.
    return p0, dmax((out - 1) * s + k - size - p0, 0)


def _pads(a: Pool2dAttrs, known: tuple[int, ...], sizes: list[Dim]) -> list[tuple[Dim, Dim]]:
    strides, kernel = a.strides, a.ksize
    if a.padding_algorithm == "SAME":
        paddings = [same_pads(n, s, k) for n, s, k in zip(sizes, strides, kernel, strict=True)]
    else:
        paddings = list(resolve_pads(a, known, strides, kernel))
    return [
        _window_pads(n, k, s, p, a.ceil_mode)
        for n, k, s, p in zip(sizes, kernel, strides, paddings, strict=True)
    ]


def _pad(b: OnnxBuilder, x: str, pads: list[tuple[Dim, Dim]], fill: float, dtype: DType) -> str:
    """Pads the spatial axes of NCHW `x` with `fill`, (before, after) per axis."""
    if all(p == 0 for pair in pads for p in pair):
        return x
    before, after = zip(*pads, strict=True)
    vector = dims_vector(b, [0, 0, *before, 0, 0, *after])
    return b.op("Pad", x, vector, float_const(b, fill, dtype))


def _divisor_mask(pads: list[tuple[Dim, Dim]], sizes: list[Dim], exclusive: bool) -> MaskPlan:
    """Per axis (ones, zeros before, zeros after) whose average-pool is Paddle's divisor / k."""
    # NOTE: Paddle's CPU kernel divides by the window clipped to the input (exclusive), else by
    # the window clipped to [-pad_before, size + pad_before): its end is clipped at the
    # *leading* pad even where the trailing pad is larger (asymmetric, SAME, ceil_mode).
    if exclusive:
        return [(n, p0, tail) for n, (p0, tail) in zip(sizes, pads, strict=True)]
    return [
        (n + p0 + dmin(p0, tail), 0, dmax(tail - p0, 0))
        for n, (p0, tail) in zip(sizes, pads, strict=True)
    ]


def _symmetric(pads: list[tuple[Dim, Dim]], sizes: list[Dim], a: Pool2dAttrs) -> list[int] | None:
    """Pads (p, p) per axis for which the ONNX pool's own padding gives Paddle's windows: the
    leading pad, and as many outputs. Pads of ONNX pools are ignored (max) or not counted
    (exclusive avg), as Paddle clips its windows; symmetric ones suit every provider."""
    found = []
    for n, (p0, tail), k, s in zip(sizes, pads, a.ksize, a.strides, strict=True):
        if not (isinstance(n, int) and isinstance(p0, int) and isinstance(tail, int)):
            return None
        if n + 2 * p0 < k or (n + 2 * p0 - k) // s != (n + p0 + tail - k) // s:
            return None
        found.append(p0)
    return found


def _windowed(b: OnnxBuilder, xs: str, x: Value, sizes: list[Dim], a: Pool2dAttrs) -> str:
    pads = _pads(a, layout(x.shape, a.data_format == "NHWC")[2], sizes)
    attrs = {"kernel_shape": list(a.ksize), "strides": list(a.strides)}
    symmetric = _symmetric(pads, sizes, a)
    if symmetric is not None and (a.pooling_type == "max" or a.exclusive):
        return b.op(POOL[a.pooling_type], xs, pads=symmetric * 2, **attrs)
    # NOTE: else pad explicitly: onnxruntime's CUDA pools drop asymmetric end pads (cuDNN).
    fill = _lowest(x.dtype) if a.pooling_type == "max" else 0.0
    y = b.op(POOL[a.pooling_type], _pad(b, xs, pads, fill, x.dtype), **attrs)
    if a.pooling_type == "max":
        return y
    # AveragePool over the zero-padded input is sum / (ksize[0] * ksize[1]); Paddle's divisor
    # is smaller where windows are clipped: divide by the average-pooled mask of what it counts.
    plan = _divisor_mask(pads, sizes, a.exclusive)
    zeros = [(before, after) for _, before, after in plan]
    if all(p == 0 for pair in zeros for p in pair):
        return y
    one = helper.make_tensor("value", TensorProto.FLOAT, [1], [1])
    mask = b.op("ConstantOfShape", dims_vector(b, [1, 1, *(n for n, _, _ in plan)]), value=one)
    if x.dtype != DType.FP32:
        mask = b.cast(mask, x.dtype)
    counts = b.op(POOL["avg"], _pad(b, mask, zeros, 0.0, x.dtype), **attrs)
    return b.op("Div", y, counts)


def _bins(b: OnnxBuilder, size: Dim, out: int) -> tuple[str, str]:
    """Paddle's adaptive bins [floor(i * size / out), ceil((i + 1) * size / out)) as a Gather
    index [out, widest bin] and the bin sizes [out]. Short bins are filled up with `size`, the
    index of an appended zero, which leaves their sums unchanged."""
    if isinstance(size, RunDim):
        return _run_time_bins(b, size, out)
    bins = [(i * size // out, -(-(i + 1) * size // out)) for i in range(out)]
    width = max(end - start for start, end in bins)
    index = [[s + j if s + j < e else size for j in range(width)] for s, e in bins]
    lengths = [end - start for start, end in bins]
    return b.const(np.asarray(index, np.int64), hint="bins"), b.ints(lengths)


def _run_time_bins(b: OnnxBuilder, size: RunDim, out: int) -> tuple[str, str]:
    """_bins for a size known only at run time, with the same integer arithmetic."""
    i = b.const(np.arange(out, dtype=np.int64), hint="bins")
    starts = b.op("Div", b.op("Mul", i, size.name), b.ints([out]))
    ends = b.op("Add", b.op("Mul", b.op("Add", i, b.ints([1])), size.name), b.ints([out - 1]))
    ends = b.op("Div", ends, b.ints([out]))
    lengths = b.op("Sub", ends, starts)
    width = b.op("ReduceMax", lengths, keepdims=0)
    zero, one = b.const(np.asarray(0, np.int64)), b.const(np.asarray(1, np.int64))
    steps = b.op("Unsqueeze", b.op("Range", zero, width, one), b.ints([0]))
    index = b.op("Add", b.op("Unsqueeze", starts, b.ints([1])), steps)
    inside = b.op("Less", index, b.op("Unsqueeze", ends, b.ints([1])))
    return b.op("Where", inside, index, size.name), lengths


def _adaptive_axis(b: OnnxBuilder, y: str, axis: int, size: Dim, out: int, x: Value) -> str:
    """Average-pools one spatial axis of NCHW `y` into `out` bins (the mean over a bin
    rectangle separates into H then W)."""
    if out == size:
        return y
    if out == 1:
        return b.op("ReduceMean", y, axes=[axis], keepdims=1)
    index, lengths = _bins(b, size, out)
    pads = [0] * 8
    pads[4 + axis] = 1
    y = b.op("Pad", y, b.ints(pads), float_const(b, 0.0, x.dtype))
    sums = b.op("ReduceSum", b.op("Gather", y, index, axis=axis), b.ints([axis + 1]), keepdims=0)
    if axis == 2:
        lengths = b.op("Unsqueeze", lengths, b.ints([1]))
    return b.op("Div", sums, b.cast(lengths, x.dtype))


def _adaptive(b: OnnxBuilder, xs: str, x: Value, sizes: list[Dim], a: Pool2dAttrs) -> str:
    if a.pooling_type == "max":
        return _adaptive_max(b, xs, x, sizes, a)
    if a.global_pooling:
        # NOTE: Paddle replaces ksize, here the output size, by the input size: one-element bins.
        return xs
    outs = a.ksize
    if outs == (1, 1):
        return b.op(GLOBAL_POOL[a.pooling_type], xs)
    if all(isinstance(n, int) and n % o == 0 for n, o in zip(sizes, outs, strict=True)):
        # Equal bins are plain windows (kernel = stride = size / out).
        steps = [n // o for n, o in zip(sizes, outs, strict=True) if isinstance(n, int)]
        return b.op(POOL[a.pooling_type], xs, kernel_shape=steps, strides=steps)
    y = xs
    for i, (n, o) in enumerate(zip(sizes, outs, strict=True)):
        y = _adaptive_axis(b, y, 2 + i, n, o, x)
    return y


def _adaptive_max(b: OnnxBuilder, xs: str, x: Value, sizes: list[Dim], a: Pool2dAttrs) -> str:
    """What Paddle computes for max with `adaptive`: its kernel (PoolRawKernel) passes
    adaptive=false for max, so ksize windows at the strides, unpadded, ksize outputs per axis;
    windows past the input are clipped, and an empty one gives -FLT_MAX."""
    kernel = sizes if a.global_pooling else list(a.ksize)
    known = [k for k in kernel if isinstance(k, int)]
    assert len(known) == len(kernel), "the rule refuses global adaptive max of unknown sizes"
    tails = [dmax((k - 1) * s + k - n, 0) for n, k, s in zip(sizes, known, a.strides, strict=True)]
    padded = _pad(b, xs, [(0, t) for t in tails], _lowest(x.dtype), x.dtype)
    y = b.op("MaxPool", padded, kernel_shape=known, strides=list(a.strides))
    return b.op("Slice", y, b.ints([0, 0]), b.ints(known), b.ints([2, 3]))


def _pool2d_emit(b: OnnxBuilder, x: Value, a: Pool2dAttrs) -> str:
    last = a.data_format == "NHWC"
    xs = to_channel_first(b, x.name, last)
    sizes = spatial(b, xs, layout(x.shape, last)[2])
    if a.adaptive:
        y = _adaptive(b, xs, x, sizes, a)
    elif a.global_pooling:
        # Paddle's global pooling drops the paddings: one window over the whole input.
        y = b.op(GLOBAL_POOL[a.pooling_type], xs)
    else:
        y = _windowed(b, xs, x, sizes, a)
    return to_channel_last(b, y, last)


EMITTERS: Final = {"pool2d": _pool2d_emit}
