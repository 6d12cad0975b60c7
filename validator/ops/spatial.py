"""Spatial rearrangement without resampling: pad3d, pixel_shuffle, flip."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from graph_proto.types import ALL, INDICES, NUMERIC, UNKNOWN, Shape
from validator.diagnostics import Code
from validator.ops._batch import batch_at, only
from validator.ops._cases import boolean, f32, i32
from validator.ops._def import (
    AttrError,
    BatchView,
    Case,
    Couples,
    In,
    OpDef,
    Out,
    ShapeError,
    TensorType,
)
from validator.ops._shape import norm_axes, require_nonempty, require_rank
from validator.ops.resize import bad_cases, known_values

_X5: Final = f32(1, 2, 2, 3, 4)
_PADS: Final = {"paddings": [0] * 6}


def _pad(paddings: list[int], **attrs: Any) -> dict[str, Any]:
    return {"paddings": paddings, **attrs}


# --- pad3d ------------------------------------------------------------------------------------

PAD_MODES: Final = ("constant", "reflect", "replicate", "circular")
_NUMPY_PAD: Final = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


@dataclass(frozen=True, slots=True)
class Pad3dAttrs:
    paddings: tuple[int, ...]  # [left, right, top, bottom, front, back]; empty with Paddings
    mode: str = "constant"
    value: float = 0.0
    data_format: str = "NCDHW"


def _pad3d_pads(paddings: TensorType | None, a: Pad3dAttrs) -> tuple[int, ...] | None:
    if paddings is None:
        if len(a.paddings) != 6:
            raise AttrError(f"paddings must have 6 values, got {list(a.paddings)}")
        pads: tuple[int, ...] | None = a.paddings
    else:
        # NOTE: the attr is ignored when the Paddings tensor is given (Paddle writes it empty).
        values = known_values(paddings)
        count = paddings.shape[0] if paddings.rank == 1 else None
        if count not in (6, UNKNOWN) or (values is not None and len(values) != 6):
            raise ShapeError(f"Paddings: expected dims [6], got {list(paddings.shape)}")
        pads = None if values is None else tuple(int(v) for v in values)
    if pads is not None and any(p < 0 for p in pads):
        raise AttrError(f"paddings must be >= 0, got {list(pads)}")
    return pads


def _pad3d_infer(x: TensorType, paddings: TensorType | None, a: Pad3dAttrs) -> Shape:
    require_rank(x, [5], "X")
    if a.mode not in PAD_MODES:
        raise AttrError(f"mode must be one of {list(PAD_MODES)}, got {a.mode!r}")
    if a.data_format not in ("NCDHW", "NDHWC"):
        raise AttrError(f"data_format must be 'NCDHW' or 'NDHWC', got {a.data_format!r}")
    pads = _pad3d_pads(paddings, a)
    axes = (2, 3, 4) if a.data_format == "NCDHW" else (1, 2, 3)
    if a.mode in ("replicate", "circular"):
        require_nonempty(x, axes, "X (replicate and circular padding)")
    out = list(x.shape)
    for axis, (before, after) in zip(axes, ((4, 5), (2, 3), (0, 1)), strict=True):
        size = x.shape[axis]
        if pads is None or size < 0:
            out[axis] = UNKNOWN
            continue
        if a.mode == "reflect" and max(pads[before], pads[after]) >= size:
            raise ShapeError(
                f"reflect paddings must be < the padded size {size} of axis {axis}, got {pads[before]} and {pads[after]}"
            )
        out[axis] = size + pads[before] + pads[after]
    return tuple(out)


def _pad3d_reference(x: np.ndarray, paddings: np.ndarray | None, a: Pad3dAttrs) -> np.ndarray:
    p = a.paddings if paddings is None else tuple(paddings.tolist())
    pairs = [(p[4], p[5]), (p[2], p[3]), (p[0], p[1])]
    widths = [(0, 0), (0, 0), *pairs] if a.data_format == "NCDHW" else [(0, 0), *pairs, (0, 0)]
    if a.mode == "constant":
        return np.pad(x, widths, constant_values=a.value)
    return np.asarray(np.pad(x, widths, mode=_NUMPY_PAD[a.mode]))  # type: ignore[call-overload]


PAD3D = OpDef(
    op_type="pad3d",
    doc="Pads the three spatial dims of a 5-D X (constant, reflect, replicate or circular).",
    inputs=(In("X"), In("Paddings", "I", optional=True)),
    outputs=(Out("Out"),),
    types={"T": NUMERIC, "I": INDICES},
    attrs=Pad3dAttrs,
    infer=_pad3d_infer,
    batch=batch_at("X"),
    cases=(
        Case(
            {"X": f32(2, 3, 2, 3, 4)}, _pad([1, 2, 0, 1, 1, 0], value=1.5), expect=_pad3d_reference
        ),
        Case(
            {"X": f32(1, 3, 4, 3, 2)},
            _pad([1, 1, 2, 0, 1, 1], mode="reflect", data_format="NDHWC"),
            expect=_pad3d_reference,
        ),
        Case({"X": _X5}, _pad([3, 0, 1, 1, 0, 2], mode="replicate"), expect=_pad3d_reference),
        Case({"X": _X5}, _pad([1, 2, 1, 1, 1, 1], mode="circular"), expect=_pad3d_reference),
        Case(
            {"X": f32(1, 2, 3, 2, 4)},
            _pad([9, 1, 0, 5, 2, 4], mode="circular", data_format="NDHWC"),
            expect=_pad3d_reference,
        ),
        Case(
            {"X": _X5, "Paddings": np.array([2, 0, 3, 1, 0, 4], np.int64)},
            _pad([], mode="replicate"),
            expect=_pad3d_reference,
        ),
        Case(
            {"X": i32(1, 2, 2, 3, 2).astype(np.int16)},
            _pad([1, 0, 2, 1, 0, 1], value=-2.5),
            expect=_pad3d_reference,
        ),
        Case(
            {"X": _X5, "Paddings": np.array([1, 0, 0, 2, 1, 1], np.int32)},
            _pad([]),
            expect=_pad3d_reference,
        ),
        *bad_cases(
            {"X": _X5},
            _PADS,
            (
                (
                    {},
                    _pad([1, 0, 0, 0, 0]),
                    "paddings must have 6 values, got [1, 0, 0, 0, 0]",
                    Code.ATTR_VALUE,
                ),
                (
                    {},
                    _pad([-1, 0, 0, 0, 0, 0]),
                    "paddings must be >= 0, got [-1, 0, 0, 0, 0, 0]",
                    Code.ATTR_VALUE,
                ),
                (
                    {"Paddings": np.array([0, 0, 0, -2, 0, 0])},
                    _pad([]),
                    "paddings must be >= 0, got [0, 0, 0, -2, 0, 0]",
                    Code.ATTR_VALUE,
                ),
                (
                    {"Paddings": np.zeros(5, np.int32)},
                    _pad([]),
                    "Paddings: expected dims [6], got [5]",
                    Code.SHAPE_MISMATCH,
                ),
                (
                    {},
                    _pad([4, 0, 0, 0, 0, 0], mode="reflect"),
                    "reflect paddings must be < the padded size 4 of axis 4, got 4 and 0",
                    Code.SHAPE_MISMATCH,
                ),
                (
                    {"X": f32(1, 2, 0, 3, 4)},
                    {"mode": "replicate"},
                    "expected non-zero dims, got [1, 2, 0, 3, 4]",
                    Code.EMPTY_DIM,
                ),
                (
                    {},
                    {"mode": "edge"},
                    "mode must be one of ['constant', 'reflect', 'replicate', 'circular'], got 'edge'",
                    Code.ATTR_VALUE,
                ),
                (
                    {},
                    {"data_format": "NCHW"},
                    "data_format must be 'NCDHW' or 'NDHWC', got 'NCHW'",
                    Code.ATTR_VALUE,
                ),
                ({"X": f32(2, 3, 4)}, {}, "X: expected rank [5], got 3", Code.AXIS_INVALID),
            ),
        ),
        Case(
            {"X": _X5},
            {},
            raises="missing required attributes ['paddings']",
            code=Code.ATTR_MISSING,
        ),
    ),
)

# --- pixel_shuffle, flip ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PixelShuffleAttrs:
    upscale_factor: int = 1
    data_format: str = "NCHW"


def _pixel_shuffle_infer(x: TensorType, a: PixelShuffleAttrs) -> Shape:
    require_rank(x, [4], "X")
    if a.data_format not in ("NCHW", "NHWC"):
        raise AttrError(f"data_format must be 'NCHW' or 'NHWC', got {a.data_format!r}")
    r = a.upscale_factor
    if r <= 0:
        raise AttrError(f"upscale_factor must be > 0, got {r}")
    n, c, h, w = x.shape if a.data_format == "NCHW" else (x.shape[0], x.shape[3], *x.shape[1:3])
    if c >= 0 and c % (r * r) != 0:
        raise ShapeError(f"channels must be divisible by upscale_factor**2 = {r * r}, got {c}")
    # NOTE: Paddle refuses an unknown channel count at compile time; it stays -1 here.
    c, h, w = (c // (r * r) if c >= 0 else UNKNOWN), _times(h, r), _times(w, r)
    return (n, c, h, w) if a.data_format == "NCHW" else (n, h, w, c)


def _times(size: int, factor: int) -> int:
    return size * factor if size >= 0 else UNKNOWN


def _pixel_shuffle_reference(x: np.ndarray, a: PixelShuffleAttrs) -> np.ndarray:
    r = a.upscale_factor
    y = x if a.data_format == "NCHW" else x.transpose(0, 3, 1, 2)
    n, c, h, w = y.shape
    y = y.reshape(n, c // (r * r), r, r, h, w).transpose(0, 1, 4, 2, 5, 3)
    y = y.reshape(n, c // (r * r), h * r, w * r)
    return y if a.data_format == "NCHW" else y.transpose(0, 2, 3, 1)


PIXEL_SHUFFLE = OpDef(
    op_type="pixel_shuffle",
    doc="Rearranges [N, C*r*r, H, W] into [N, C, H*r, W*r] (or the NHWC equivalent).",
    inputs=(In("X"),),
    outputs=(Out("Out"),),
    types={"T": NUMERIC},
    attrs=PixelShuffleAttrs,
    infer=_pixel_shuffle_infer,
    batch=batch_at("X"),
    cases=(
        Case({"X": f32(2, 8, 3, 4)}, {"upscale_factor": 2}, expect=_pixel_shuffle_reference),
        Case(
            {"X": f32(1, 3, 2, 18)},
            {"upscale_factor": 3, "data_format": "NHWC"},
            expect=_pixel_shuffle_reference,
        ),
        Case({"X": i32(2, 4, 3, 2)}, {"upscale_factor": 2}, expect=_pixel_shuffle_reference),
        *bad_cases(
            {"X": f32(1, 8, 2, 2)},
            {"upscale_factor": 2},
            (
                (
                    {"X": f32(1, 9, 2, 2)},
                    {},
                    "channels must be divisible by upscale_factor**2 = 4, got 9",
                    Code.SHAPE_MISMATCH,
                ),
                ({}, {"upscale_factor": 0}, "upscale_factor must be > 0, got 0", Code.ATTR_VALUE),
                ({}, {"upscale_factor": -2}, "upscale_factor must be > 0, got -2", Code.ATTR_VALUE),
                (
                    {},
                    {"data_format": "NCDHW"},
                    "data_format must be 'NCHW' or 'NHWC', got 'NCDHW'",
                    Code.ATTR_VALUE,
                ),
                ({"X": f32(8, 2, 2)}, {}, "X: expected rank [4], got 3", Code.AXIS_INVALID),
            ),
        ),
    ),
)


@dataclass(frozen=True, slots=True)
class FlipAttrs:
    axis: tuple[int, ...]


def _flip_infer(x: TensorType, a: FlipAttrs) -> Shape:
    # NOTE: Paddle only rejects literal repeats ([1, 1]); [1, -3] on rank 4 is rejected here too.
    norm_axes(a.axis, x.rank)
    return x.shape


def _flip_batch(view: BatchView) -> int:
    axis = only(view, "X")
    if axis in norm_axes(view.attrs.axis, view.type("X").rank):
        raise Couples("reverses the order of the rows")
    return axis


FLIP = OpDef(
    op_type="flip",
    doc="Reverses X along each of `axis`.",
    inputs=(In("X"),),
    outputs=(Out("Out"),),
    types={"T": ALL},
    attrs=FlipAttrs,
    infer=_flip_infer,
    batch=_flip_batch,
    cases=(
        Case({"X": f32(2, 3, 4)}, {"axis": [0, 2]}, expect=lambda x, a: np.flip(x, a.axis)),
        Case({"X": f32(2, 3, 4)}, {"axis": [-1]}, expect=lambda x, a: np.flip(x, a.axis)),
        Case({"X": f32()}, {"axis": []}, expect=lambda x, a: x),
        Case({"X": boolean(2, 3, 2)}, {"axis": [2, -3]}, expect=lambda x, a: np.flip(x, a.axis)),
        Case(
            {"X": f32(2, 3, 4)},
            {"axis": [3]},
            raises="axis must be in [-3, 3), got 3",
            code=Code.AXIS_INVALID,
        ),
        Case(
            {"X": f32(2, 3, 4)},
            {"axis": [1, -2]},
            raises="axis must not repeat, got [1, -2]",
            code=Code.AXIS_INVALID,
        ),
        Case(
            {"X": f32(2, 3)},
            {},
            raises="missing required attributes ['axis']",
            code=Code.ATTR_MISSING,
        ),
        Case(
            {"X": f32()},
            {"axis": [0]},
            raises="axis 0 needs an input of rank >= 1, got a 0-D tensor",
            code=Code.AXIS_INVALID,
        ),
    ),
)

OPS = (PAD3D, PIXEL_SHUFFLE, FLIP)
