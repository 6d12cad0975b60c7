"""Ops that move data without arithmetic: reshape, transpose, squeeze, concat, split, stack.

slice, strided_slice, expand_v2 and tile live in `slicing.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from typing import Any, Final

import numpy as np

from graph_proto.types import ALL, UNKNOWN, Shape
from validator.diagnostics import Code
from validator.ops._batch import RESHAPED, along, only
from validator.ops._cases import boolean, f32, i32, i64
from validator.ops._def import (
    AttrError,
    AxisError,
    BatchView,
    Case,
    Couples,
    In,
    OpDef,
    Out,
    ShapeError,
    TensorType,
)
from validator.ops._operands import (
    BACKEND_ATTRS,
    Operand,
    carry,
    check_rank,
    constant_axis,
    int_operand,
)
from validator.ops._shape import merge_dim, norm_axes, norm_axis, product

MAX_OUTPUTS: Final = 1 << 14  # split outputs; no op names more vars than that in practice


def merged_dims(xs: tuple[TensorType, ...], skip: int | None = None) -> list[int]:
    """Dims shared by every input of concat/stack: known ones must agree, -1 takes the other."""
    first = xs[0]
    for i, t in enumerate(xs):
        if t.rank != first.rank:
            raise ShapeError(f"X[{i}]: expected rank {first.rank} like X[0], got {list(t.shape)}")
    return [
        UNKNOWN
        if j == skip
        else reduce(lambda a, b: merge_dim(a, b, f"dim {j} of X"), (t.shape[j] for t in xs))
        for j in range(first.rank)
    ]


def _floats(*shape: int) -> np.ndarray:
    return np.asarray(np.arange(int(np.prod(shape))).reshape(shape) / 4 - 1, np.float32)


def _ints(*shape: int) -> np.ndarray:
    return np.asarray(np.arange(int(np.prod(shape))).reshape(shape) * 3 - 5, np.int64)


def _bools(*shape: int) -> np.ndarray:
    return np.asarray(np.arange(int(np.prod(shape))).reshape(shape) % 3 == 0)


# --- reshape2 -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReshapeAttrs:
    shape: tuple[int, ...] = ()


def reshape_dims(x: Shape, spec: Operand) -> Shape:
    """Paddle's ValidateShape: 0 copies X's dim, one -1 is inferred, None is unknown."""
    check_rank(len(spec))
    if spec.count(-1) > 1:
        raise AttrError(f"expected at most one -1 in shape, got {spec}")
    # NOTE: Paddle 3.x: when X is empty (a 0 dim), a 0 in shape is a size of 0, not a copy.
    empty = 0 in x
    out: list[int] = []
    for i, s in enumerate(spec):
        if s is not None and s < -1:
            raise AttrError(f"expected shape values >= -1, got {spec}")
        copy = s == 0 and not empty
        if copy and i >= len(x):
            raise ShapeError(
                f"shape[{i}] = 0 copies a dim of X, expected X of rank > {i}, got {list(x)}"
            )
        out.append(UNKNOWN if s is None else x[i] if copy else s)
    size = product(x)
    if size < 0 or None in spec:
        return tuple(out)  # NOTE: as Paddle: nothing is inferred, not even from copied dims
    if -1 in spec:
        rest = product([d for i, d in enumerate(out) if spec[i] != -1])
        if rest == 0 or size % rest:
            raise ShapeError(f"cannot infer the -1 of shape {spec} for X {list(x)}")
        out[spec.index(-1)] = size // rest
    elif product(out) != size:
        raise ShapeError(f"expected a shape of {size} elements like X {list(x)}, got {spec}")
    return tuple(out)


def _reshape2_infer(
    x: TensorType,
    shape: TensorType | None,
    shape_list: tuple[TensorType, ...] | None,
    a: ReshapeAttrs,
) -> Shape | TensorType:
    spec = int_operand(a.shape, ("ShapeTensor", shape_list), ("Shape", shape))
    out = reshape_dims(x.shape, spec)
    return carry(x, out, lambda v: v.reshape(out))


def _reshape_ref(x: np.ndarray, shape: Any, shape_list: Any, a: ReshapeAttrs) -> np.ndarray:
    spec = (
        [t.item() for t in shape_list]
        if shape_list
        else list(shape)
        if shape is not None
        else list(a.shape)
    )
    copy = x.size > 0  # an empty X takes a 0 as a size
    return x.reshape([x.shape[i] if s == 0 and copy else s for i, s in enumerate(spec)])


def _reshape_batch(view: BatchView) -> int:
    """A shape attr that copies (0) every dim up to the batch keeps each row's block whole,
    even where other dims are unknown (a transformer's [0, 0, heads, size])."""
    axis = only(view, "X")
    copied = view.attrs.shape[: axis + 1]
    by_tensor = any(view.types_in.get(s) for s in ("Shape", "ShapeTensor"))
    if not by_tensor and len(copied) == axis + 1 and all(d == 0 for d in copied):
        return axis
    return RESHAPED(view)


RESHAPE2 = OpDef(
    op_type="reshape2",
    doc="Reshapes X to `shape` (or the ShapeTensor list / Shape tensor); 0 copies, -1 infers.",
    inputs=(
        In("X"),
        In("Shape", None, optional=True),
        In("ShapeTensor", None, variadic=True, optional=True),
    ),
    outputs=(Out("Out"), Out("XShape", unused=True)),
    types={"T": ALL},
    attrs=ReshapeAttrs,
    ignored_attrs=BACKEND_ATTRS,
    infer=_reshape2_infer,
    batch=_reshape_batch,
    cases=(
        Case({"X": f32(2, 3, 4)}, {"shape": [0, -1]}, expect=_reshape_ref),
        Case({"X": f32(2, 3, 4)}, {"shape": [4, 3, 2]}, expect=_reshape_ref),
        Case({"X": f32(1, 1)}, {"shape": []}, expect=_reshape_ref),
        Case({"X": f32(0, 3)}, {"shape": [-1]}, expect=_reshape_ref),
        Case({"X": f32(0, 3)}, {"shape": [3, 2, 0]}, expect=_reshape_ref),
        Case({"X": i64(6), "Shape": np.array([3, 2], np.int32)}, expect=_reshape_ref),
        Case(
            {"X": f32(2, 6), "ShapeTensor": (np.array([3], np.int64), np.array(-1, np.int32))},
            {"shape": [-1, -1]},
            expect=_reshape_ref,
        ),
        Case({"X": f32(2, 3)}, {"shape": [-1, -1]}, raises="at most one -1", code=Code.ATTR_VALUE),
        Case(
            {"X": f32(2, 3)},
            {"shape": [4, 2]},
            raises="shape of 6 elements",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"X": f32(2, 3)},
            {"shape": [4, -1]},
            raises="cannot infer the -1",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"X": f32(0, 3)},
            {"shape": [0, -1]},
            raises="cannot infer the -1",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"X": f32(2, 3)},
            {"shape": [-2, 3]},
            raises="expected shape values >= -1",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {"X": f32(6)},
            {"shape": [3, 0]},
            raises="shape[1] = 0 copies a dim of X",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"X": f32(1)}, {"shape": [1] * 10}, raises="rank <= 9, got 10", code=Code.SHAPE_MISMATCH
        ),
        Case(
            {"X": f32(6), "Shape": f32(2)},
            raises="expected int32 or int64, got float32",
            code=Code.DTYPE_MISMATCH,
        ),
        Case(
            {"X": f32(6), "Shape": i32(2, 1)},
            raises="expected a 1-D tensor",
            code=Code.SHAPE_MISMATCH,
        ),
        # Lowering variants (deterministic arrays: the shared generator's order stays as it was).
        Case({"X": _bools(2, 3)}, {"shape": [0, 3, -1]}, expect=_reshape_ref),
        Case({"X": _ints(2, 3, 4)}, {"shape": [0, 0, 0]}, expect=_reshape_ref),
        Case({"X": _floats(0, 3)}, {"shape": [4, 0]}, expect=_reshape_ref),
    ),
)

# --- transpose2, flatten_contiguous_range, squeeze2, unsqueeze2 -----------------------------


@dataclass(frozen=True, slots=True)
class TransposeAttrs:
    axis: tuple[int, ...]


def _transpose2_infer(x: TensorType, a: TransposeAttrs) -> Shape | TensorType:
    if len(a.axis) != x.rank:
        raise AxisError(f"expected axis to permute {x.rank} dims, got {list(a.axis)}")
    perm = norm_axes(a.axis, x.rank)
    out = tuple(x.shape[p] for p in perm)
    return carry(x, out, lambda v: v.transpose(perm))


def _transpose_batch(view: BatchView) -> int:
    axis = only(view, "X")
    return norm_axes(view.attrs.axis, view.type("X").rank).index(axis)


TRANSPOSE2 = OpDef(
    op_type="transpose2",
    doc="Permutes the dims of X by `axis` (negative axes count from the end).",
    inputs=(In("X"),),
    outputs=(Out("Out"), Out("XShape", unused=True)),
    types={"T": ALL},
    attrs=TransposeAttrs,
    ignored_attrs=BACKEND_ATTRS | {"data_format"},
    infer=_transpose2_infer,
    batch=_transpose_batch,
    cases=(
        Case({"X": f32(2, 3, 4)}, {"axis": [2, 0, 1]}, expect=lambda x, a: x.transpose(a.axis)),
        Case({"X": f32(2, 3, 4)}, {"axis": [-1, 0, 1]}, expect=lambda x, a: x.transpose(a.axis)),
        Case({"X": f32()}, {"axis": []}, expect=lambda x, a: x),
        Case({"X": _bools(2, 3)}, {"axis": [-1, -2]}, expect=lambda x, a: x.transpose(a.axis)),
        Case({"X": _ints(2, 3)}, {"axis": [0, 1]}, expect=lambda x, a: x),
        Case(
            {"X": f32(2, 3, 4)},
            {"axis": [0, 0, 1]},
            raises="must not repeat",
            code=Code.AXIS_INVALID,
        ),
        Case(
            {"X": f32(2, 3, 4)},
            {"axis": [0, 1]},
            raises="expected axis to permute 3 dims",
            code=Code.AXIS_INVALID,
        ),
        Case(
            {"X": f32(2, 3)},
            {"axis": [0, 2]},
            raises="axis must be in [-2, 2), got 2",
            code=Code.AXIS_INVALID,
        ),
    ),
)


@dataclass(frozen=True, slots=True)
class FlattenAttrs:
    start_axis: int = 1
    stop_axis: int = 1


def _flatten_contiguous_range_infer(x: TensorType, a: FlattenAttrs) -> Shape | TensorType:
    if x.rank == 0:
        if {a.start_axis, a.stop_axis} - {0, -1}:
            raise AxisError(f"expected axes 0 or -1 for a 0-D X, got {a.start_axis}, {a.stop_axis}")
        out: Shape = (1,)
    else:
        start = norm_axis(a.start_axis, x.rank, what="start_axis")
        stop = norm_axis(a.stop_axis, x.rank, what="stop_axis")
        if stop < start:
            raise AxisError(f"expected stop_axis >= start_axis {start}, got {stop}")
        out = (*x.shape[:start], product(x.shape[start : stop + 1]), *x.shape[stop + 1 :])
    return carry(x, out, lambda v: v.reshape(out))


def _flatten_ref(x: np.ndarray, a: FlattenAttrs) -> np.ndarray:
    if x.ndim == 0:
        return x.reshape(1)
    start, stop = a.start_axis % x.ndim, a.stop_axis % x.ndim
    return x.reshape((*x.shape[:start], -1, *x.shape[stop + 1 :]))


FLATTEN_CONTIGUOUS_RANGE = OpDef(
    op_type="flatten_contiguous_range",
    doc="Merges dims start_axis..stop_axis of X into one (a 0-D X becomes [1]).",
    inputs=(In("X"),),
    outputs=(Out("Out"), Out("XShape", unused=True)),
    types={"T": ALL},
    attrs=FlattenAttrs,
    ignored_attrs=BACKEND_ATTRS,
    infer=_flatten_contiguous_range_infer,
    batch=RESHAPED,
    cases=(
        Case({"X": f32(2, 3, 4)}, {"start_axis": 1, "stop_axis": 2}, expect=_flatten_ref),
        Case({"X": f32(2, 3, 4)}, {"start_axis": 0, "stop_axis": -1}, expect=_flatten_ref),
        Case({"X": f32()}, {"start_axis": 0, "stop_axis": -1}, expect=_flatten_ref),
        Case({"X": _ints(2, 3, 4)}, {"start_axis": 1, "stop_axis": 1}, expect=_flatten_ref),
        Case({"X": _floats(2, 0, 3)}, {"start_axis": 0, "stop_axis": 1}, expect=_flatten_ref),
        Case(
            {"X": f32(2, 3)},
            {"start_axis": 1, "stop_axis": 0},
            raises="expected stop_axis >= ",
            code=Code.AXIS_INVALID,
        ),
        Case(
            {"X": f32(2, 3)},
            {"start_axis": 0, "stop_axis": 5},
            raises="stop_axis must be in",
            code=Code.AXIS_INVALID,
        ),
        Case(
            {"X": f32()},
            {"start_axis": 1, "stop_axis": 1},
            raises="for a 0-D X",
            code=Code.AXIS_INVALID,
        ),
    ),
)


@dataclass(frozen=True, slots=True)
class SqueezeAttrs:
    axes: tuple[int, ...] = ()


def _squeeze2_infer(x: TensorType, a: SqueezeAttrs) -> Shape | TensorType:
    if not a.axes:
        drop = {i for i, d in enumerate(x.shape) if d == 1}  # an unknown dim stays
    elif x.rank == 0:
        if set(a.axes) - {0, -1}:
            raise AxisError(f"expected axes 0 or -1 for a 0-D X, got {list(a.axes)}")
        drop = set()
    else:
        # NOTE: at compile time Paddle also drops a listed -1 dim, taking it for 1 (run time drops
        # only real 1s); a listed dim of another size silently stays. Axes may repeat.
        listed = {norm_axis(axis, x.rank, what="axes") for axis in a.axes}
        drop = {i for i in listed if x.shape[i] in (1, UNKNOWN)}
    out = tuple(d for i, d in enumerate(x.shape) if i not in drop)
    return carry(x, out, lambda v: v.reshape(out))


def _squeeze_ref(x: np.ndarray, a: SqueezeAttrs) -> np.ndarray:
    axes = {axis % max(x.ndim, 1) for axis in a.axes} if a.axes else set(range(x.ndim))
    return x.reshape([d for i, d in enumerate(x.shape) if not (i in axes and d == 1)])


def _squeeze_batch(view: BatchView) -> int:
    """A request of one row has a batch dim of 1, which squeezing all 1s (or that axis) drops."""
    axis, axes, rank = only(view, "X"), view.attrs.axes, view.type("X").rank
    if not axes or axis in {a + rank if a < 0 else a for a in axes}:  # axes may repeat
        raise Couples("squeezes the batch dimension away when a request has one row")
    return RESHAPED(view)


SQUEEZE2 = OpDef(
    op_type="squeeze2",
    doc="Removes the size-1 dims of X listed in `axes` (all size-1 dims if empty).",
    inputs=(In("X"),),
    outputs=(Out("Out"), Out("XShape", unused=True)),
    types={"T": ALL},
    attrs=SqueezeAttrs,
    ignored_attrs=BACKEND_ATTRS,
    infer=_squeeze2_infer,
    batch=_squeeze_batch,
    cases=(
        Case({"X": f32(2, 1, 4)}, {"axes": [1]}, expect=_squeeze_ref),
        Case({"X": f32(1, 3, 1)}, {"axes": []}, expect=_squeeze_ref),
        Case({"X": f32(2, 3, 1)}, {"axes": [1, -1, -1]}, expect=_squeeze_ref),
        Case({"X": f32()}, {"axes": [0]}, expect=_squeeze_ref),
        Case({"X": _floats(1)}, {"axes": [-1]}, expect=_squeeze_ref),
        Case({"X": _bools(2, 3)}, {"axes": [0]}, expect=_squeeze_ref),
        Case(
            {"X": f32(2, 1)},
            {"axes": [2]},
            raises="axes must be in [-2, 2), got 2",
            code=Code.AXIS_INVALID,
        ),
        Case({"X": f32()}, {"axes": [1]}, raises="for a 0-D X", code=Code.AXIS_INVALID),
    ),
)


@dataclass(frozen=True, slots=True)
class UnsqueezeAttrs:
    axes: tuple[int, ...] = ()


def _unsqueeze2_infer(
    x: TensorType,
    axes_tensor: TensorType | None,
    axes_list: tuple[TensorType, ...] | None,
    a: UnsqueezeAttrs,
) -> Shape | TensorType:
    axes = int_operand(a.axes, ("AxesTensor", axes_tensor), ("AxesTensorList", axes_list))
    check_rank(x.rank + len(axes))
    known = [axis for axis in axes if axis is not None]
    if len(known) < len(axes):
        return (UNKNOWN,) * (x.rank + len(axes))  # as Paddle: the positions are unknown
    dims = list(x.shape)
    for axis in known:  # each axis counts in the rank reached so far, as Paddle inserts
        at = axis + len(dims) + 1 if axis < 0 else axis
        if not 0 <= at <= len(dims):
            raise AxisError(f"axes must be in [{-len(dims) - 1}, {len(dims)}], got {axis}")
        dims.insert(at, 1)
    out = tuple(dims)
    return carry(x, out, lambda v: v.reshape(out))


def _unsqueeze_ref(x: np.ndarray, axes_tensor: Any, axes_list: Any, a: UnsqueezeAttrs) -> Any:
    axes = list(a.axes)
    if axes_tensor is not None or axes_list:
        axes = axes_tensor.tolist() if axes_tensor is not None else [t.item() for t in axes_list]
    for axis in axes:
        x = np.expand_dims(x, axis)
    return x


UNSQUEEZE2 = OpDef(
    op_type="unsqueeze2",
    doc="Inserts size-1 dims into X at `axes`, one after the other (or from AxesTensor/List).",
    inputs=(
        In("X"),
        In("AxesTensor", None, optional=True),
        In("AxesTensorList", None, variadic=True, optional=True),
    ),
    outputs=(Out("Out"), Out("XShape", unused=True)),
    types={"T": ALL},
    attrs=UnsqueezeAttrs,
    ignored_attrs=BACKEND_ATTRS,
    infer=_unsqueeze2_infer,
    batch=RESHAPED,
    cases=(
        Case({"X": f32(2, 3)}, {"axes": [0, 3]}, expect=_unsqueeze_ref),
        Case({"X": f32(2, 3)}, {"axes": [-1, 0]}, expect=_unsqueeze_ref),
        Case({"X": f32()}, {"axes": [0]}, expect=_unsqueeze_ref),
        Case({"X": f32(2), "AxesTensor": np.array([0, 2], np.int64)}, expect=_unsqueeze_ref),
        Case({"X": _floats(2, 3)}, {"axes": [2, 0, -1]}, expect=_unsqueeze_ref),
        Case(
            {"X": _ints(2, 3), "AxesTensorList": (np.array([2], np.int32), np.array(-4, np.int64))},
            expect=_unsqueeze_ref,
        ),
        Case(
            {"X": f32(2, 3)},
            {"axes": [4]},
            raises="axes must be in [-3, 2], got 4",
            code=Code.AXIS_INVALID,
        ),
        Case(
            {"X": f32(2, 3)},
            {"axes": [0] * 8},
            raises="rank <= 9, got 10",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"X": f32(2), "AxesTensor": boolean(1)},
            raises="expected int32 or int64, got bool",
            code=Code.DTYPE_MISMATCH,
        ),
    ),
)

# --- concat, split, stack ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AxisAttrs:
    axis: int = 0


def _concat_infer(
    xs: tuple[TensorType, ...], axis_tensor: TensorType | None, a: AxisAttrs
) -> Shape | TensorType:
    axis_value = a.axis if axis_tensor is None else constant_axis(axis_tensor, "AxisTensor")
    axis = norm_axis(axis_value, xs[0].rank)
    dims = merged_dims(xs, skip=axis)
    along = [t.shape[axis] for t in xs]
    # NOTE: funcs::ComputeAndCheckShape: one unknown size on the axis makes the sum unknown.
    dims[axis] = UNKNOWN if UNKNOWN in along else sum(along)
    out = tuple(dims)
    return carry(xs[0], out, lambda *vs: np.concatenate(vs, axis), *xs[1:])


def _concat_ref(xs: tuple[np.ndarray, ...], axis_tensor: Any, a: AxisAttrs) -> np.ndarray:
    return np.concatenate(xs, a.axis if axis_tensor is None else axis_tensor.item())


def _same_axis(view: BatchView, what: str) -> int:
    """The one batch axis of every argument of X (a variadic slot)."""
    axes = set(view.axes["X"])
    if None in axes:
        raise Couples(f"{what} unbatched X with batched X: its dims must match every batch size")
    if len(axes) != 1:
        raise Couples("lines the batch dimensions of its inputs up on different axes")
    return next(a for a in axes if a is not None)


def _axis_operand(view: BatchView, slot: str) -> int:
    """The `axis` attr, or the value of the optional scalar tensor `slot`, which replaces it."""
    if view.axis(slot) is not None:
        raise Couples(f"takes its axis from batched {slot!r}")
    if not view.types_in.get(slot):
        return int(view.attrs.axis)
    value = view.type(slot).value
    if value is None:
        raise Couples(f"takes its axis from {slot!r}, unknown before run time")
    return int(value[0])


def _concat_batch(view: BatchView) -> int:
    axis = _same_axis(view, "concatenates")
    rank = view.types_in["X"][0].rank
    return along(
        axis, _axis_operand(view, "AxisTensor"), rank, "concatenates along the batch dimension"
    )


CONCAT = OpDef(
    op_type="concat",
    doc="Joins the X tensors along `axis` (or AxisTensor); other dims must agree.",
    inputs=(In("X", variadic=True), In("AxisTensor", None, optional=True)),
    outputs=(Out("Out"),),
    types={"T": ALL},
    attrs=AxisAttrs,
    ignored_attrs=BACKEND_ATTRS,
    infer=_concat_infer,
    batch=_concat_batch,
    cases=(
        Case({"X": (f32(2, 3), f32(2, 5), f32(2, 1))}, {"axis": 1}, expect=_concat_ref),
        Case({"X": (i64(2), i64(3))}, {"axis": -1}, expect=_concat_ref),
        Case(
            {"X": (f32(2, 3), f32(4, 3)), "AxisTensor": np.array([0], np.int32)}, expect=_concat_ref
        ),
        Case({"X": (_bools(2, 3), _bools(2, 1))}, {"axis": -1}, expect=_concat_ref),
        Case({"X": (_floats(2, 3),)}, {"axis": 0}, expect=_concat_ref),
        Case(
            {"X": (f32(2, 3), f32(2, 3))},
            {"axis": 2},
            raises="axis must be in [-2, 2), got 2",
            code=Code.AXIS_INVALID,
        ),
        Case(
            {"X": (f32(2, 3), f32(3, 3))},
            {"axis": 1},
            raises="expected equal sizes, got 2 and 3",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"X": (f32(2, 3), f32(2))},
            {"axis": 0},
            raises="X[1]: expected rank 2 like X[0]",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"X": (f32(), f32())},
            {"axis": 0},
            raises="needs an input of rank >= 1",
            code=Code.AXIS_INVALID,
        ),
    ),
)


@dataclass(frozen=True, slots=True)
class SplitAttrs:
    axis: int = 0
    num: int = 0
    sections: tuple[int, ...] = ()


def _split_sections(dim: int, a: SplitAttrs, sections: Operand) -> list[int]:
    """The size of every output along the axis, X's size `dim` being known."""
    if a.num:
        if dim % a.num:
            raise ShapeError(f"expected a size divisible by num {a.num}, got {dim}")
        return [dim // a.num] * a.num
    given = sum(s for s in sections if s is not None and s >= 0)
    if None in sections:  # sizes from tensors whose values are unknown
        if given > dim:
            raise ShapeError(f"expected sections adding up to at most {dim}, got {sections}")
        return [UNKNOWN if s is None or s < 0 else s for s in sections]
    known = [s for s in sections if s is not None]
    if -1 in known:
        if given > dim or given == dim > 0:  # the -1 part must not be empty
            raise ShapeError(f"expected sections leaving room for the -1 in {dim}, got {sections}")
        return [dim - given if s == -1 else s for s in known]
    if given != dim:
        raise ShapeError(f"expected sections adding up to {dim}, got {sections}")
    return known


def _split_infer(
    x: TensorType,
    axis_tensor: TensorType | None,
    sections_list: tuple[TensorType, ...] | None,
    a: SplitAttrs,
) -> list[tuple[Shape | TensorType, ...]]:
    if a.num < 0:
        raise AttrError(f"expected num >= 0, got {a.num}")
    if a.num and (a.sections or sections_list):
        raise AttrError(f"expected either num or sections, got num {a.num} and sections too")
    sections = int_operand(a.sections, ("SectionsTensorList", sections_list))
    if any(s is not None and s < -1 for s in sections) or sections.count(-1) > 1:
        raise AttrError(f"expected sections >= 0 with at most one -1, got {sections}")
    count = a.num or len(sections)
    if not 0 < count <= MAX_OUTPUTS:
        raise AttrError(f"expected 1 to {MAX_OUTPUTS} outputs from num or sections, got {count}")
    axis_value = a.axis if axis_tensor is None else constant_axis(axis_tensor, "AxisTensor")
    axis = norm_axis(axis_value, x.rank)
    dim = x.shape[axis]
    if dim < 0:  # NOTE: Paddle keeps every output unknown along the axis, even a given section
        return [(x.shape,) * count]
    sizes = _split_sections(dim, a, sections)
    shapes = [(*x.shape[:axis], s, *x.shape[axis + 1 :]) for s in sizes]
    if UNKNOWN in sizes:  # a section from a tensor known only at run time: no values to carry
        return [tuple(shapes)]
    cuts = np.cumsum(sizes[:-1]).tolist()
    return [
        tuple(
            carry(x, shape, lambda v, i=i: np.split(v, cuts, axis)[i])
            for i, shape in enumerate(shapes)
        )
    ]


def _split_ref(x: np.ndarray, axis_tensor: Any, sections_list: Any, a: SplitAttrs) -> Any:
    axis = a.axis if axis_tensor is None else axis_tensor.item()
    if a.num:
        return tuple(np.split(x, a.num, axis))
    sections = [t.item() for t in sections_list] if sections_list else list(a.sections)
    if -1 in sections:
        sections[sections.index(-1)] = x.shape[axis] - (sum(sections) + 1)
    return tuple(np.split(x, np.cumsum(sections[:-1]), axis))


def _split_batch(view: BatchView) -> int:
    axis = only(view, "X")
    rank = view.type("X").rank
    return along(axis, _axis_operand(view, "AxisTensor"), rank, "splits the batch dimension")


SPLIT = OpDef(
    op_type="split",
    doc="Cuts X along `axis` into `num` equal parts or parts of `sections` (one may be -1).",
    inputs=(
        In("X"),
        In("AxisTensor", None, optional=True),
        In("SectionsTensorList", None, variadic=True, optional=True),
    ),
    outputs=(Out("Out", variadic=True),),
    types={"T": ALL},
    attrs=SplitAttrs,
    ignored_attrs=BACKEND_ATTRS,
    infer=_split_infer,
    batch=_split_batch,
    cases=(
        Case({"X": f32(4, 6)}, {"axis": 1, "num": 3}, expect=_split_ref),
        Case({"X": f32(4, 6)}, {"axis": -1, "sections": [1, -1, 2]}, expect=_split_ref),
        Case({"X": f32(4, 6)}, {"axis": 0, "sections": [4, 0]}, expect=_split_ref),
        Case(
            {
                "X": i64(4, 6),
                "SectionsTensorList": (np.array([2], np.int32), np.array([4], np.int32)),
            },
            {"axis": 1},
            expect=_split_ref,
        ),
        Case({"X": _floats(4, 6)}, {"axis": 0, "num": 1}, expect=_split_ref),
        Case({"X": _bools(4, 6)}, {"axis": 1, "sections": [0, -1, 0, 2]}, expect=_split_ref),
        Case(
            {"X": _ints(4, 6), "AxisTensor": np.array(-2, np.int64)},
            {"sections": [3, -1]},
            expect=_split_ref,
        ),
        Case(
            {"X": f32(4, 6)},
            {"axis": 1, "num": 4},
            raises="divisible by num 4, got 6",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"X": f32(4, 6)},
            {"axis": 1, "sections": [2, 3]},
            raises="adding up to 6",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"X": f32(4, 6)},
            {"axis": 1, "sections": [6, -1]},
            raises="room for the -1",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"X": f32(4, 6)},
            {"axis": 1, "sections": [-1, -1]},
            raises="at most one -1",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {"X": f32(4, 6)},
            {"axis": 1, "sections": [8, -2]},
            raises="expected sections >= 0",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {"X": f32(4, 6)},
            {"axis": 1},
            raises="expected 1 to 16384 outputs",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {"X": f32(4, 6)},
            {"axis": 1, "num": 1 << 20},
            raises="expected 1 to 16384 outputs",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {"X": f32(4, 6)},
            {"axis": 2, "num": 2},
            raises="axis must be in [-2, 2), got 2",
            code=Code.AXIS_INVALID,
        ),
        Case(
            {"X": f32(4, 6)},
            {"axis": 1, "num": 2, "sections": [1, 5]},
            raises="expected either num or sections",
            code=Code.ATTR_VALUE,
        ),
    ),
)


def _stack_infer(xs: tuple[TensorType, ...], a: AxisAttrs) -> Shape | TensorType:
    dims = merged_dims(xs)
    check_rank(len(dims) + 1)
    axis = norm_axis(a.axis, len(dims) + 1)
    out = (*dims[:axis], len(xs), *dims[axis:])
    return carry(xs[0], out, lambda *vs: np.stack(vs, axis), *xs[1:])


def _stack_batch(view: BatchView) -> int:
    axis = _same_axis(view, "stacks")
    at = norm_axis(view.attrs.axis, view.types_in["X"][0].rank + 1)
    return axis + 1 if at <= axis else axis


STACK = OpDef(
    op_type="stack",
    doc="Stacks the equally shaped X tensors along a new dim at `axis`.",
    inputs=(In("X", variadic=True),),
    outputs=(Out("Y"),),
    types={"T": ALL},
    attrs=AxisAttrs,
    ignored_attrs=BACKEND_ATTRS,
    infer=_stack_infer,
    batch=_stack_batch,
    cases=(
        Case({"X": (f32(2, 3), f32(2, 3))}, {"axis": 1}, expect=lambda xs, a: np.stack(xs, a.axis)),
        Case({"X": (f32(2), f32(2), f32(2))}, {"axis": -1}, expect=lambda xs, a: np.stack(xs, -1)),
        Case({"X": (i64(), i64())}, {"axis": 0}, expect=lambda xs, a: np.stack(xs)),
        Case({"X": (_bools(2, 3),)}, {"axis": -3}, expect=lambda xs, a: np.stack(xs, -3)),
        Case(
            {"X": (f32(2, 3), f32(2, 4))},
            {"axis": 0},
            raises="expected equal sizes, got 3 and 4",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"X": (f32(2), f32(2))},
            {"axis": 2},
            raises="axis must be in [-2, 2), got 2",
            code=Code.AXIS_INVALID,
        ),
    ),
)

OPS = (
    RESHAPE2,
    TRANSPOSE2,
    FLATTEN_CONTIGUOUS_RANGE,
    SQUEEZE2,
    UNSQUEEZE2,
    CONCAT,
    SPLIT,
    STACK,
)
