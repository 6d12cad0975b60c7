"""pool2d: max and average pooling over H and W (NCHW and NHWC), with Paddle's window rules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from graph_proto.types import FLOATS, UNKNOWN, Shape
from validator.diagnostics import Code
from validator.ops._batch import batch_at
from validator.ops._cases import f32
from validator.ops._def import (
    AttrError,
    Case,
    EmptyDimError,
    In,
    OpDef,
    Out,
    ShapeError,
    TensorType,
    UnsupportedError,
)
from validator.ops._shape import require_rank
from validator.ops.nn import (
    BACKEND_FLAGS,
    case,
    channel_last,
    compose,
    from_nchw,
    layout,
    pair,
    resolve_pads,
    to_nchw,
)


@dataclass(frozen=True, slots=True)
class Pool2dAttrs:
    ksize: tuple[int, ...]
    pooling_type: str
    strides: tuple[int, ...] = (1, 1)
    paddings: tuple[int, ...] = (0, 0)
    padding_algorithm: str = "EXPLICIT"
    global_pooling: bool = False
    adaptive: bool = False
    ceil_mode: bool = False
    exclusive: bool = True
    data_format: str = "NCHW"


def _pool_dim(size: int, k: int, s: int, pad: tuple[int, int], ceil_mode: bool) -> int:
    if size < 0:
        return UNKNOWN
    span = size + pad[0] + pad[1] - k + (s - 1 if ceil_mode else 0)
    # NOTE: Paddle divides in C++, truncating toward zero: a window up to stride - 1 longer than
    # the padded input still gives one output (squeezenet's 3x3/2 max pool on a 2x2 map).
    out = (span // s if span >= 0 else -(-span // s)) + 1
    if out < 1:
        raise ShapeError(f"window of {k} does not fit an input of {size} with padding {list(pad)}")
    # NOTE: Paddle lets the first or (with ceil_mode) last window fall wholly in the padding; it
    # then outputs -FLT_MAX (max) or divides by zero (avg). Such windows are rejected here.
    if pad[0] >= k or (out - 1) * s - pad[0] >= size:
        raise ShapeError(
            f"expected every window to overlap the input, got kernel {k}, stride {s}, padding {list(pad)}, ceil_mode {ceil_mode} on an input of {size}"
        )
    return out


def _pool2d_infer(x: TensorType, a: Pool2dAttrs) -> Shape:
    require_rank(x, (4,), "X")
    last = channel_last(a.data_format, "data_format")
    if a.pooling_type not in ("max", "avg"):
        raise AttrError(f"pooling_type must be one of ['max', 'avg'], got {a.pooling_type!r}")
    n, c, sizes = layout(x.shape, last)
    kernel: Shape = pair(a.ksize, "ksize")
    strides = pair(a.strides, "strides")
    pads = resolve_pads(a, sizes, strides, kernel)
    if 0 in sizes:
        raise EmptyDimError(f"expected non-empty spatial dims to pool over, got {list(x.shape)}")
    if a.global_pooling:
        kernel = sizes  # Paddle replaces ksize by the input size
        if a.adaptive and a.pooling_type == "max" and UNKNOWN in sizes:
            # Paddle's max kernel ignores `adaptive`: its windows and output size are the input
            # size, which ONNX must know when the model is built.
            raise UnsupportedError(
                "global adaptive max pooling: expected known input sizes (Paddle's window and "
                f"output size), got {list(sizes)}"
            )
    if a.adaptive:
        return compose(n, c, kernel, last)  # ksize is the output size
    if a.global_pooling:
        pads = ((0, 0), (0, 0))
    spatial = tuple(
        UNKNOWN if k < 0 else _pool_dim(size, k, s, p, a.ceil_mode)
        for size, k, s, p in zip(sizes, kernel, strides, pads, strict=True)
    )
    return compose(n, c, spatial, last)


def _pool2d_cost(x: TensorType, outputs: list[TensorType], a: Pool2dAttrs) -> int:
    sizes = tuple(max(d, 1) for d in layout(x.shape, a.data_format == "NHWC")[2])
    if a.global_pooling:
        window = sizes[0] * sizes[1]
    elif a.adaptive:
        window = (-(-sizes[0] // a.ksize[0]) + 1) * (-(-sizes[1] // a.ksize[1]) + 1)
    else:
        window = a.ksize[0] * a.ksize[1]
    return outputs[0].numel() * window


# numpy reference ---------------------------------------------------------------------------------


FLT_MAX: Final = float(np.finfo(np.float32).max)


def _pool_bounds(i: int, size: int, out: int, k: int, s: int, pad: int, adaptive: bool) -> slice:
    if adaptive:
        return slice(i * size // out, -(-(i + 1) * size // out))
    start = i * s - pad
    return slice(max(start, 0), min(start + k, size))


def _padded_span(i: int, size: int, k: int, s: int, pad: int) -> int:
    # NOTE: not exclusive, Paddle's CPU kernel counts the window clipped to
    # [-pad_before, size + pad_before): the leading pad also bounds the end.
    start = i * s - pad
    return min(start + k, size + pad) - start


def _pool2d_ref(x: np.ndarray, a: Pool2dAttrs) -> np.ndarray:
    last = a.data_format == "NHWC"
    xs = to_nchw(x, last).astype(np.float64)
    sizes = xs.shape[2:]
    kernel = sizes if a.global_pooling else a.ksize
    pads = resolve_pads(a, sizes, a.strides, kernel)
    if a.global_pooling or a.adaptive:
        pads = ((0, 0), (0, 0))
    outs = [
        k if a.adaptive else int((size + p[0] + p[1] - k + (s - 1) * a.ceil_mode) / s) + 1
        for size, p, k, s in zip(sizes, pads, kernel, a.strides, strict=True)
    ]
    # NOTE: Paddle's kernel (PoolRawKernel) ignores `adaptive` for max: ksize windows at the
    # strides, unpadded, ksize outputs; a window past the input is empty and gives -FLT_MAX.
    adaptive = a.adaptive and a.pooling_type == "avg"
    res = np.zeros((*xs.shape[:2], *outs))
    for i in range(outs[0]):
        rows = _pool_bounds(i, sizes[0], outs[0], kernel[0], a.strides[0], pads[0][0], adaptive)
        for j in range(outs[1]):
            cols = _pool_bounds(j, sizes[1], outs[1], kernel[1], a.strides[1], pads[1][0], adaptive)
            win = xs[:, :, rows, cols]
            if a.pooling_type == "max":
                res[:, :, i, j] = win.max(axis=(2, 3), initial=-FLT_MAX)
            else:
                count = (
                    win.shape[2] * win.shape[3]
                    if a.exclusive or a.adaptive
                    else _padded_span(i, sizes[0], kernel[0], a.strides[0], pads[0][0])
                    * _padded_span(j, sizes[1], kernel[1], a.strides[1], pads[1][0])
                )
                res[:, :, i, j] = win.sum(axis=(2, 3)) / count
    return from_nchw(res, last, x)


def _pl(x: Shape, raises: str = "", code: Code | None = None, **attrs: object) -> Case:
    defaults: dict[str, object] = {"pooling_type": "max", "ksize": [2, 2]}
    return case({"X": f32(*x)}, _pool2d_ref, raises, code, defaults | attrs)


# fmt: off
_POOL2D_CASES: Final = (
    _pl((1, 2, 8, 8), ksize=[3, 3], strides=[2, 2], ceil_mode=True),
    _pl((1, 2, 7, 7), pooling_type="avg", ksize=[3, 3], strides=[2, 2], paddings=[1, 1], exclusive=False),
    _pl((1, 2, 7, 7), pooling_type="avg", ksize=[3, 3], paddings=[0, 1, 1, 2]),
    _pl((1, 2, 7, 7), pooling_type="avg", strides=[2, 2], padding_algorithm="SAME"),
    _pl((1, 2, 7, 7), pooling_type="avg", ksize=[3, 3], strides=[2, 2], ceil_mode=True, exclusive=False),
    _pl((1, 3, 8, 8), pooling_type="avg", ksize=[3, 5], adaptive=True),
    _pl((1, 3, 7, 11), ksize=[3, 4], adaptive=True),
    _pl((2, 3, 5, 6), global_pooling=True, paddings=[1, 1]),
    _pl((1, 7, 6, 3), ksize=[3, 3], strides=[2, 2], paddings=[1, 1], ceil_mode=True, data_format="NHWC"),
    _pl((1, 2, 4, 4), "pooling_type must be one of ['max', 'avg'], got 'sum'", Code.ATTR_VALUE, pooling_type="sum"),
    _pl((1, 2, 4, 4), "ksize must be >= 1, got [0, 2]", Code.ATTR_VALUE, ksize=[0, 2]),
    _pl((1, 2, 4, 4), "strides must be >= 1, got [1, -1]", Code.ATTR_VALUE, strides=[1, -1]),
    _pl((1, 2, 2, 2), ksize=[3, 3], strides=[2, 2]),
    _pl((1, 2, 2, 3), ksize=[3, 4], strides=[2, 2], ceil_mode=True),
    _pl((1, 2, 2, 2), "window of 3 does not fit an input of 2 with padding [0, 0]", Code.SHAPE_MISMATCH, ksize=[3, 3]),
    _pl((1, 2, 2, 2), "window of 5 does not fit an input of 2", Code.SHAPE_MISMATCH, ksize=[5, 5], strides=[2, 2],
        ceil_mode=True),
    _pl((1, 2, 4, 4), "expected every window to overlap the input", Code.SHAPE_MISMATCH, ksize=[1, 1], strides=[2, 2],
        ceil_mode=True),
    _pl((1, 2, 4, 4), "got kernel 2, stride 1, padding [2, 2]", Code.SHAPE_MISMATCH, paddings=[2, 2]),
    _pl((1, 2, 0, 4), "expected non-empty spatial dims", Code.EMPTY_DIM, adaptive=True),
    _pl((2, 4, 4), "X: expected rank [4], got 3", Code.AXIS_INVALID),
    # lowering variants: Paddle's divisors, truncated windows, adaptive bins
    _pl((1, 2, 7, 7), pooling_type="avg", strides=[2, 2], padding_algorithm="SAME", exclusive=False),
    _pl((1, 2, 6, 6), pooling_type="avg", ksize=[3, 3], strides=[2, 2], paddings=[0, 1, 1, 2], ceil_mode=True,
        exclusive=False),
    _pl((1, 2, 2, 3), pooling_type="avg", ksize=[3, 4], strides=[2, 2], ceil_mode=True),
    _pl((1, 5, 6, 3), pooling_type="avg", ksize=[3, 3], strides=[2, 2], paddings=[1, 1], data_format="NHWC"),
    _pl((1, 2, 7, 6), ksize=[3, 3], strides=[2, 2], padding_algorithm="SAME"),
    _pl((2, 3, 5, 6), pooling_type="avg", global_pooling=True),
    _pl((1, 2, 3, 4), pooling_type="avg", ksize=[5, 7], adaptive=True),
    _pl((1, 7, 5, 3), pooling_type="avg", ksize=[3, 2], adaptive=True, data_format="NHWC"),
    _pl((1, 2, 8, 9), pooling_type="avg", ksize=[2, 3], adaptive=True),
    _pl((1, 2, 5, 7), pooling_type="avg", ksize=[1, 3], adaptive=True),
    _pl((1, 3, 5, 6), pooling_type="avg", ksize=[1, 1], adaptive=True),
    _pl((1, 2, 4, 5), ksize=[9, 2], adaptive=True),
    _pl((1, 2, 3, 4), pooling_type="avg", global_pooling=True, adaptive=True),
    _pl((1, 2, 3, 4), global_pooling=True, adaptive=True),
    Case({"X": f32(1, 2, 6, 5).astype(np.float16)}, {"pooling_type": "avg", "ksize": [3, 3], "paddings": [1, 1]},
         expect=_pool2d_ref, rtol=2e-3, atol=2e-3),
    Case({"X": f32(1, 2, 6, 5).astype(np.float16)}, {"pooling_type": "max", "ksize": [3, 3], "strides": [2, 2],
         "ceil_mode": True}, expect=_pool2d_ref),
    Case({"X": f32(1, 2, 6, 5).astype(np.float64)}, {"pooling_type": "max", "ksize": [2, 3], "paddings": [1, 0]},
         expect=_pool2d_ref),
)
# fmt: on

POOL2D = OpDef(
    op_type="pool2d",
    doc="Max or average pooling over H and W: explicit/SAME/VALID padding, ceil_mode, global or adaptive.",
    inputs=(In("X"),),
    outputs=(Out("Out"),),
    types={"T": FLOATS},
    attrs=Pool2dAttrs,
    ignored_attrs=BACKEND_FLAGS,
    infer=_pool2d_infer,
    batch=batch_at("X"),
    cost=_pool2d_cost,
    cases=_POOL2D_CASES,
)


OPS = (POOL2D,)
