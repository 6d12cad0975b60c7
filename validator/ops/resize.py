"""Spatial resampling: nearest_interp_v2 and bilinear_interp_v2 (pad3d, pixel_shuffle, flip: spatial.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from graph_proto.types import FLOATS, INDICES, UNKNOWN, DType, Shape
from validator.diagnostics import Code
from validator.ops._batch import batch_at
from validator.ops._cases import f32, i64
from validator.ops._def import AttrError, Case, In, OpDef, Out, ShapeError, TensorType
from validator.ops._shape import require_nonempty, require_rank

INT32_LIMIT: Final = 2**31  # Paddle casts computed sizes to int
BadCases = tuple[tuple[Any, ...], ...]


def known_values(t: TensorType) -> tuple[int | float, ...] | None:
    """The values of a small constant tensor (bools excluded), or None when not known."""
    if t.value is None or any(isinstance(v, bool) for v in t.value):
        return None
    return tuple(v for v in t.value if isinstance(v, int | float))


def bad_cases(inputs: dict[str, Any], attrs: dict[str, Any], table: BadCases) -> tuple[Case, ...]:
    """Invalid cases from (extra inputs, extra attrs, message fragment[, code]) rows."""
    return tuple(
        Case(
            {**inputs, **row[0]},
            {**attrs, **row[1]},
            raises=row[2],
            code=row[3] if len(row) > 3 else None,
        )
        for row in table
    )


_X4: Final = f32(1, 2, 3, 4)
_X5: Final = f32(1, 2, 2, 3, 4)

# --- nearest_interp_v2, bilinear_interp_v2 ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class InterpAttrs:
    data_layout: str = "NCHW"  # Paddle writes NCHW/NHWC for 5-D inputs too
    out_d: int = 0
    out_h: int = 0
    out_w: int = 0
    scale: tuple[float, ...] = ()
    interp_method: str = "bilinear"
    align_corners: bool = True
    align_mode: int = 1


def _spatial_axes(rank: int, a: InterpAttrs) -> range:
    return range(1, rank - 1) if a.data_layout == "NHWC" else range(2, rank)


def _shown(scales: Sequence[float]) -> list[float]:
    """Scales as written (FLOATS attrs decode to the float64 nearest each float32)."""
    return [float(str(np.float32(s))) for s in scales]


def _check_scales(scales: Sequence[float], what: str) -> None:
    if not all(s > 0 for s in scales):  # also rejects NaN
        raise AttrError(f"{what} must be > 0, got {_shown(scales)}")


def _scaled(size: int, scale: float) -> int:
    """int(size * scale) as Paddle's kernel computes it: float32 operands multiplied in double.

    NOTE: Paddle's compile-time rule rounds the product to float32 first (10 * 1.3f records 13),
    but its kernel produces 12: graphgate follows the kernel, and a stored 13 is only a warning.
    """
    if size < 0:
        return UNKNOWN
    exact = float(np.float32(size)) * float(np.float32(scale))  # exact in float64
    if not exact < INT32_LIMIT:
        raise ShapeError(f"expected an output size below 2**31, got {size} * {_shown([scale])[0]}")
    out = int(exact)
    if not 0 < out < INT32_LIMIT:
        # NOTE: Paddle records -1 at compile time here, and its kernel then fails.
        raise ShapeError(
            f"scale {_shown([scale])[0]} turns size {size} into {out}; expected a size >= 1"
        )
    return out


def _vector(t: TensorType, lengths: tuple[int, ...], what: str) -> None:
    if t.rank != 1 or t.shape[0] not in (*lengths, UNKNOWN):
        expected = " or ".join(f"[{n}]" for n in dict.fromkeys(lengths))
        raise ShapeError(f"{what}: expected dims {expected}, got {list(t.shape)}")


def _size_element(t: TensorType, attr: int) -> int:
    if t.shape not in ((), (1,), (UNKNOWN,)):
        raise ShapeError(f"SizeTensor: expected tensors of dims [1] or [], got {list(t.shape)}")
    values = known_values(t)
    if values is None:
        # NOTE: Paddle's compile-time rule takes the out_d/out_h/out_w attr here; the Python API
        # writes the int elements of `size` there (and -1 for the tensor ones).
        return attr if attr > 0 else UNKNOWN
    if not values[0] > 0:
        raise ShapeError(f"SizeTensor: expected sizes >= 1, got {values[0]}")
    return int(values[0])


def _interp_sizes(
    x: TensorType,
    out_size: TensorType | None,
    size_tensor: tuple[TensorType, ...] | None,
    scale_tensor: TensorType | None,
    a: InterpAttrs,
) -> tuple[int, ...]:
    """Output spatial sizes; what runs takes SizeTensor, then OutSize, then Scale, then scale,
    then out_d/out_h/out_w (Paddle's compile-time rule ignores OutSize: it records -1)."""
    axes = _spatial_axes(x.rank, a)
    n = len(axes)
    attrs = (a.out_d, a.out_h, a.out_w)[-n:]
    if size_tensor:
        if len(size_tensor) != n:
            raise ShapeError(f"SizeTensor: expected {n} tensors, got {len(size_tensor)}")
        return tuple(_size_element(t, attr) for t, attr in zip(size_tensor, attrs, strict=True))
    if out_size is not None:
        _vector(out_size, (n,), "OutSize")
        sizes = known_values(out_size)
        if sizes is None:
            return (UNKNOWN,) * n
        if not all(s > 0 for s in sizes):
            raise ShapeError(f"OutSize: expected sizes >= 1, got {list(sizes)}")
        return tuple(int(s) for s in sizes)
    if scale_tensor is not None:
        _vector(scale_tensor, (1, n), "Scale")
        values = known_values(scale_tensor)
        if values is None:
            return (UNKNOWN,) * n
        scales = tuple(float(v) for v in values) * (n if len(values) == 1 else 1)
        _check_scales(scales, "Scale")
    elif a.scale:
        if len(a.scale) != n:
            raise AttrError(
                f"scale must have {n} values for a rank-{x.rank} X, got {_shown(a.scale)}"
            )
        scales = a.scale
        _check_scales(scales, "scale")
    else:
        if not all(s > 0 for s in attrs):
            names = ", ".join(("out_d", "out_h", "out_w")[-n:])
            raise AttrError(
                f"{names} must be > 0 when no size tensor or scale is given, got {list(attrs)}"
            )
        return attrs
    return tuple(_scaled(x.shape[axis], s) for axis, s in zip(axes, scales, strict=True))


def interp(method: str, ranks: tuple[int, ...]) -> Callable[..., Shape]:
    """The shape rule of `<method>_interp_v2` for inputs of `ranks`."""

    def rule(
        x: TensorType,
        out_size: TensorType | None,
        size_tensor: tuple[TensorType, ...] | None,
        scale_tensor: TensorType | None,
        a: InterpAttrs,
    ) -> Shape:
        require_rank(x, ranks, "X")
        if a.interp_method != method:
            raise AttrError(
                f"interp_method must be {method!r} for this op, got {a.interp_method!r}"
            )
        if a.data_layout not in ("NCHW", "NHWC"):
            raise AttrError(f"data_layout must be 'NCHW' or 'NHWC', got {a.data_layout!r}")
        if a.align_mode not in (0, 1):
            raise AttrError(f"align_mode must be 0 or 1, got {a.align_mode}")
        require_nonempty(x, what="X")
        sizes = _interp_sizes(x, out_size, size_tensor, scale_tensor, a)
        out = list(x.shape)
        for axis, size in zip(_spatial_axes(x.rank, a), sizes, strict=True):
            out[axis] = size
        return tuple(out)

    return rule


def _resample_axis(
    x: np.ndarray, axis: int, size: int, scale: float, a: InterpAttrs, method: str
) -> np.ndarray:
    """Paddle's CPU kernel along one axis (nearest and bilinear are separable)."""
    n_in = x.shape[axis]
    k = np.arange(size, dtype=np.float64)
    ratio = 0.0
    if size > 1:
        ratio = (
            (n_in - 1) / (size - 1) if a.align_corners else 1 / scale if scale > 0 else n_in / size
        )
    if method == "nearest":
        src = np.floor(ratio * k + 0.5) if a.align_corners else np.floor(ratio * k)
        return np.asarray(np.take(x, np.minimum(src.astype(np.int64), n_in - 1), axis))
    half_pixel = a.align_mode == 0 and not a.align_corners
    pos = np.maximum(ratio * (k + 0.5) - 0.5, 0) if half_pixel else ratio * k
    low = np.minimum(np.floor(pos).astype(np.int64), n_in - 1)
    high = np.minimum(low + 1, n_in - 1)
    weight = (pos - low).reshape([size if i == axis else 1 for i in range(x.ndim)])
    blend = np.take(x, low, axis) * (1 - weight) + np.take(x, high, axis) * weight
    return np.asarray(blend, dtype=x.dtype)


def interp_reference(method: str) -> Callable[..., np.ndarray]:
    def reference(
        x: np.ndarray,
        out_size: np.ndarray | None,
        size_tensor: tuple[np.ndarray, ...] | None,
        _scale: np.ndarray | None,
        a: InterpAttrs,
    ) -> np.ndarray:
        y = np.moveaxis(x, -1, 1) if a.data_layout == "NHWC" else x
        n = y.ndim - 2
        scales: Sequence[float] = a.scale if a.scale else (0.0,) * n
        if size_tensor:
            sizes = [int(t.reshape(-1)[0]) for t in size_tensor]
        elif out_size is not None:
            sizes = out_size.tolist()
        elif a.scale:
            sizes = [_scaled(y.shape[2 + i], s) for i, s in enumerate(a.scale)]
        else:
            sizes = [a.out_d, a.out_h, a.out_w][-n:]
        for i, size in enumerate(sizes):
            y = _resample_axis(y, 2 + i, size, scales[i], a, method)
        return np.moveaxis(y, 1, -1) if a.data_layout == "NHWC" else y

    return reference


def _bilinear_interp_v2_cost(
    _x: TensorType,
    _out_size: TensorType | None,
    _size_tensor: tuple[TensorType, ...] | None,
    _scale: TensorType | None,
    outputs: list[TensorType],
    _a: InterpAttrs,
) -> int:
    # Each output element blends 4 inputs: about 8 FLOPs.
    return 8 * outputs[0].numel()


_INTERP_INPUTS: Final = (
    In("X"),
    In("OutSize", DType.INT32, optional=True),
    In("SizeTensor", "I", variadic=True, optional=True),
    In("Scale", DType.FP32, optional=True),
)
_NEAREST = interp_reference("nearest")
_BILINEAR = interp_reference("bilinear")
_NEAREST_ATTRS: Final = {"interp_method": "nearest", "align_corners": False, "align_mode": 0}
_BILINEAR_ATTRS: Final = {"interp_method": "bilinear", "align_corners": False, "align_mode": 0}


def _one(value: int) -> np.ndarray:
    return np.array([value], np.int32)


NEAREST_INTERP_V2 = OpDef(
    op_type="nearest_interp_v2",
    doc="Nearest-neighbour resize of the spatial dims of a 4-D or 5-D X (NCHW or NHWC).",
    inputs=_INTERP_INPUTS,
    outputs=(Out("Out"),),
    types={"T": FLOATS | {DType.INT32, DType.INT64, DType.UINT8}, "I": INDICES},
    attrs=InterpAttrs,
    ignored_attrs=frozenset({"use_mkldnn"}),
    infer=interp("nearest", (4, 5)),
    batch=batch_at("X"),
    cases=(
        Case({"X": f32(2, 3, 4, 5)}, {**_NEAREST_ATTRS, "out_h": 8, "out_w": 7}, expect=_NEAREST),
        Case({"X": f32(2, 3, 4, 5)}, {**_NEAREST_ATTRS, "scale": [1.5, 0.5]}, expect=_NEAREST),
        Case(
            {"X": f32(1, 4, 5, 3)},
            {**_NEAREST_ATTRS, "out_h": 2, "out_w": 9, "data_layout": "NHWC"},
            expect=_NEAREST,
        ),
        Case({"X": _X5}, {**_NEAREST_ATTRS, "scale": [2.0, 1.0, 0.5]}, expect=_NEAREST),
        Case(
            {"X": _X4, "OutSize": np.array([5, 6], np.int32)},
            {**_NEAREST_ATTRS, "out_h": -1, "out_w": -1},
            expect=_NEAREST,
        ),
        Case(
            {"X": _X4, "SizeTensor": (_one(6), _one(2))},
            {**_NEAREST_ATTRS, "out_h": -1, "out_w": 2},
            expect=_NEAREST,
        ),
        Case(
            {"X": f32(2, 3, 5, 3)},
            {**_NEAREST_ATTRS, "out_h": 9, "out_w": 5, "align_corners": True},
            expect=_NEAREST,
        ),
        Case(
            {"X": i64(1, 2, 3, 4, 2)},
            {**_NEAREST_ATTRS, "out_d": 3, "out_h": 2, "out_w": 7, "data_layout": "NHWC"},
            expect=_NEAREST,
        ),
        *bad_cases(
            {"X": _X4},
            {**_NEAREST_ATTRS, "out_h": 2, "out_w": 2},
            (
                ({}, {"scale": [0.0, 1.0]}, "scale must be > 0, got [0.0, 1.0]", Code.ATTR_VALUE),
                ({}, {"scale": [-2.0, 2.0]}, "scale must be > 0, got [-2.0, 2.0]", Code.ATTR_VALUE),
                (
                    {},
                    {"scale": [2.0]},
                    "scale must have 2 values for a rank-4 X, got [2.0]",
                    Code.ATTR_VALUE,
                ),
                (
                    {},
                    {"scale": [0.25, 1.0]},
                    "scale 0.25 turns size 3 into 0; expected a size >= 1",
                    Code.SHAPE_MISMATCH,
                ),
                (
                    {},
                    {"scale": [1e30, 1.0]},
                    "expected an output size below 2**31",
                    Code.SHAPE_MISMATCH,
                ),
                (
                    {},
                    {"out_h": -1},
                    "out_h, out_w must be > 0 when no size tensor or scale is given, got [-1, 2]",
                    Code.ATTR_VALUE,
                ),
                (
                    {"OutSize": np.array([5, 0], np.int32)},
                    {},
                    "OutSize: expected sizes >= 1, got [5, 0]",
                    Code.SHAPE_MISMATCH,
                ),
                (
                    {"OutSize": np.array([5, 2, 1], np.int32)},
                    {},
                    "OutSize: expected dims [2], got [3]",
                    Code.SHAPE_MISMATCH,
                ),
                (
                    {"SizeTensor": (_one(6),)},
                    {},
                    "SizeTensor: expected 2 tensors, got 1",
                    Code.SHAPE_MISMATCH,
                ),
                (
                    {"SizeTensor": (_one(6), _one(-3))},
                    {},
                    "SizeTensor: expected sizes >= 1, got -3",
                    Code.SHAPE_MISMATCH,
                ),
                (
                    {"SizeTensor": (_one(6), np.ones((1, 1), np.int32))},
                    {},
                    "SizeTensor: expected tensors of dims [1] or []",
                    Code.SHAPE_MISMATCH,
                ),
                (
                    {"Scale": np.ones((1, 2), np.float32)},
                    {},
                    "Scale: expected dims [1] or [2], got [1, 2]",
                    Code.SHAPE_MISMATCH,
                ),
                (
                    {"X": f32(1, 2, 0, 4)},
                    {},
                    "X: expected non-zero dims, got [1, 2, 0, 4]",
                    Code.EMPTY_DIM,
                ),
                ({"X": f32(2, 3, 4)}, {}, "X: expected rank [4, 5], got 3", Code.AXIS_INVALID),
                (
                    {},
                    {"interp_method": "bilinear"},
                    "interp_method must be 'nearest' for this op, got 'bilinear'",
                    Code.ATTR_VALUE,
                ),
                (
                    {},
                    {"data_layout": "AnyLayout"},
                    "data_layout must be 'NCHW' or 'NHWC', got 'AnyLayout'",
                    Code.ATTR_VALUE,
                ),
                ({}, {"align_mode": 2}, "align_mode must be 0 or 1, got 2", Code.ATTR_VALUE),
            ),
        ),
    ),
)

BILINEAR_INTERP_V2 = OpDef(
    op_type="bilinear_interp_v2",
    doc="Bilinear resize of the spatial dims of a 4-D X (NCHW or NHWC).",
    inputs=_INTERP_INPUTS,
    outputs=(Out("Out"),),
    types={"T": FLOATS | {DType.UINT8}, "I": INDICES},
    attrs=InterpAttrs,
    ignored_attrs=frozenset({"use_mkldnn"}),
    infer=interp("bilinear", (4,)),
    batch=batch_at("X"),
    cost=_bilinear_interp_v2_cost,
    cases=(
        Case({"X": f32(2, 3, 4, 5)}, {**_BILINEAR_ATTRS, "out_h": 8, "out_w": 7}, expect=_BILINEAR),
        Case(
            {"X": f32(2, 3, 4, 5)},
            {**_BILINEAR_ATTRS, "scale": [1.5, 0.5], "align_mode": 1},
            expect=_BILINEAR,
        ),
        Case(
            {"X": f32(2, 3, 4, 5)},
            {**_BILINEAR_ATTRS, "scale": [2.0, 2.0], "align_corners": True},
            expect=_BILINEAR,
        ),
        Case(
            {"X": f32(1, 4, 5, 3)},
            {**_BILINEAR_ATTRS, "out_h": 2, "out_w": 9, "data_layout": "NHWC"},
            expect=_BILINEAR,
        ),
        Case(
            {"X": _X4, "SizeTensor": (_one(6), _one(2))},
            {**_BILINEAR_ATTRS, "out_h": -1, "out_w": -1},
            expect=_BILINEAR,
        ),
        Case(
            {"X": f32(2, 3, 4, 5)},
            {**_BILINEAR_ATTRS, "out_h": 7, "out_w": 3, "align_mode": 1},
            expect=_BILINEAR,
        ),
        Case(
            {"X": f32(1, 4, 5, 3)},
            {
                **_BILINEAR_ATTRS,
                "out_h": 9,
                "out_w": 6,
                "align_corners": True,
                "data_layout": "NHWC",
            },
            expect=_BILINEAR,
        ),
        *bad_cases(
            {"X": _X4},
            _BILINEAR_ATTRS,
            (
                (
                    {},
                    {"scale": [1.0, float("nan")]},
                    "scale must be > 0, got [1.0, nan]",
                    Code.ATTR_VALUE,
                ),
                (
                    {"X": _X5},
                    {"scale": [2.0, 2.0, 2.0]},
                    "X: expected rank [4], got 5",
                    Code.AXIS_INVALID,
                ),
                (
                    {},
                    {"out_h": 0, "out_w": 3},
                    "out_h, out_w must be > 0 when no size tensor or scale is given, got [0, 3]",
                    Code.ATTR_VALUE,
                ),
                (
                    {},
                    {"scale": [2.0, 2.0], "interp_method": "bicubic"},
                    "interp_method must be 'bilinear' for this op, got 'bicubic'",
                    Code.ATTR_VALUE,
                ),
                (
                    {"X": i64(1, 2, 3, 4)},
                    {"scale": [2.0, 2.0]},
                    "input 'X': expected one of",
                    Code.DTYPE_MISMATCH,
                ),
            ),
        ),
    ),
)

OPS = (NEAREST_INTERP_V2, BILINEAR_INTERP_V2)
