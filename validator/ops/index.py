"""Gathering by index and one-hot encoding: gather, index_select, lookup_table_v2, one_hot_v2, where."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graph_proto.types import ALL, FLOATS, INDICES, UNKNOWN, DType, Shape
from validator.diagnostics import Code
from validator.ops._batch import ROWWISE, only
from validator.ops._cases import boolean, f32, i32, i64
from validator.ops._def import (
    AttrError,
    AxisError,
    BatchView,
    Case,
    Couples,
    EmptyDimError,
    In,
    NoAttrs,
    OpDef,
    Out,
    ShapeError,
    TensorType,
)
from validator.ops._shape import dtype_attr, merge_dim, norm_axis, require_rank


def _scalar_value(t: TensorType, what: str) -> int | None:
    """The value of a one-element integer tensor (dims [] or [1]), None when not known."""
    if t.shape not in ((), (1,), (UNKNOWN,)):
        raise ShapeError(f"{what}: expected dims [1] or [], got {list(t.shape)}")
    if t.value is None or len(t.value) != 1 or not isinstance(t.value[0], int):
        return None
    return int(t.value[0])


def _take_count(x: TensorType, axis: int, count: int, what: str) -> None:
    """Taking elements along an empty axis can only read out of bounds."""
    if x.shape[axis] == 0 and count > 0:
        raise EmptyDimError(
            f"{what}: expected a non-empty axis {axis} to take {count} elements from, got dims {list(x.shape)}"
        )


# --- gather, index_select ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GatherAttrs:
    axis: int = 0


def _gather_count(index: TensorType) -> int | None:
    """How many elements Index selects; None for a 0-D Index (the axis is dropped)."""
    if index.rank == 0:
        return None
    if index.rank == 1:
        return index.shape[0]
    if index.rank == 2 and index.shape[1] in (0, 1):
        return index.shape[0] if index.shape[1] == 1 else 0
    if index.rank == 2:
        raise ShapeError(
            f"Index: expected a last dim of 0 or 1 for a 2-D Index, got {list(index.shape)}"
        )
    raise AxisError(f"Index: expected rank 0, 1 or 2, got {index.rank} (dims {list(index.shape)})")


def _gather_infer(
    x: TensorType, index: TensorType, axis_tensor: TensorType | None, a: GatherAttrs
) -> Shape:
    axis = a.axis
    if axis_tensor is not None:
        # NOTE: Paddle's compile-time rule then records the axis-0 result whatever the axis is;
        # the run-time axis is the tensor's value, which lowering needs as a constant.
        value = _scalar_value(axis_tensor, "Axis")
        if value is None:
            raise AttrError(
                "Axis: expected a tensor whose value is known before run time, got a computed one"
            )
        axis = value
    count = _gather_count(index)
    ax = norm_axis(axis, x.rank)
    _take_count(x, ax, 1 if count is None else count, "X")
    middle = () if count is None else (count,)
    return x.shape[:ax] + middle + x.shape[ax + 1 :]


def _gather_reference(
    x: np.ndarray, index: np.ndarray, axis_tensor: np.ndarray | None, a: GatherAttrs
) -> np.ndarray:
    axis = a.axis if axis_tensor is None else int(axis_tensor.reshape(-1)[0])
    flat = index if index.ndim == 0 else index.reshape(-1)
    return np.take(x, flat, axis)


def _take_batch(view: BatchView, axis: int, keeps_dim: bool) -> int:
    """X's slices at Index along `axis`: rows apart when only one of X and Index is batched,
    and X is not batched on `axis` itself."""
    x_axis, index_axis = view.axis("X"), view.axis("Index")
    if x_axis is not None and index_axis is not None:
        raise Couples("indexes batched X with batched Index: every row may take any row's slice")
    if x_axis is None:
        if index_axis != 0:
            raise Couples(f"expected the batch dimension at axis 0 of Index, got axis {index_axis}")
        return axis
    if x_axis == axis:
        raise Couples("takes slices across the batch dimension")
    return x_axis if x_axis < axis or keeps_dim else x_axis - 1


def _gather_batch(view: BatchView) -> int:
    if view.axis("Axis") is not None:
        raise Couples("takes its axis from a batched tensor")
    axis = view.attrs.axis
    if view.types_in.get("Axis"):
        axis = int(_scalar_value(view.type("Axis"), "Axis") or 0)
    x, index = view.type("X"), view.type("Index")
    return _take_batch(view, norm_axis(axis, x.rank), _gather_count(index) is not None)


GATHER = OpDef(
    op_type="gather",
    doc="Takes the slices of X at Index along `axis` (or the constant Axis tensor).",
    inputs=(In("X"), In("Index", "I"), In("Axis", "A", optional=True)),
    outputs=(Out("Out"),),
    types={"T": ALL, "I": INDICES, "A": INDICES},
    attrs=GatherAttrs,
    ignored_attrs=frozenset({"overwrite"}),  # a gradient flag of Paddle 2.x exports
    infer=_gather_infer,
    batch=_gather_batch,
    cases=(
        Case({"X": f32(5, 3), "Index": i64(4)}, expect=_gather_reference),
        Case({"X": f32(2, 5, 3), "Index": i32(4)}, {"axis": 1}, expect=_gather_reference),
        Case({"X": f32(2, 5, 3), "Index": i32(4, high=3)}, {"axis": -1}, expect=_gather_reference),
        Case({"X": f32(2, 5, 3), "Index": i64(4, 1)}, {"axis": 1}, expect=_gather_reference),
        Case(
            {"X": f32(2, 5, 3), "Index": np.array(2, np.int64)},
            {"axis": 1},
            expect=_gather_reference,
        ),
        Case(
            {"X": f32(2, 5, 3), "Index": i32(4), "Axis": np.array([1], np.int64)},
            expect=_gather_reference,
        ),
        Case({"X": boolean(3, 2), "Index": i64(2, high=3)}, expect=_gather_reference),
        Case(
            {"X": f32(2, 5, 3), "Index": i32(4)},
            {"axis": 3},
            raises="axis must be in [-3, 3), got 3",
            code=Code.AXIS_INVALID,
        ),
        Case(
            {"X": f32(2, 5, 3), "Index": i32(4)},
            {"axis": -4},
            raises="axis must be in [-3, 3), got -4",
            code=Code.AXIS_INVALID,
        ),
        Case(
            {"X": f32(), "Index": np.array(0, np.int64)},
            raises="axis 0 needs an input of rank >= 1, got a 0-D tensor",
            code=Code.AXIS_INVALID,
        ),
        Case(
            {"X": f32(2, 5, 3), "Index": i32(4, 2)},
            raises="Index: expected a last dim of 0 or 1 for a 2-D Index, got [4, 2]",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"X": f32(2, 5, 3), "Index": i32(2, 3, 1)},
            raises="Index: expected rank 0, 1 or 2, got 3",
            code=Code.AXIS_INVALID,
        ),
        Case(
            {"X": f32(0, 3), "Index": i32(2)},
            raises="X: expected a non-empty axis 0 to take 2 elements from",
            code=Code.EMPTY_DIM,
        ),
        Case(
            {"X": f32(2, 5, 3), "Index": i32(4), "Axis": np.array([5], np.int64)},
            raises="axis must be in [-3, 3), got 5",
            code=Code.AXIS_INVALID,
        ),
        Case(
            {"X": f32(2, 5, 3), "Index": i32(4), "Axis": np.array([1, 2], np.int64)},
            raises="Axis: expected dims [1] or [], got [2]",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"X": f32(2, 5, 3), "Index": f32(4)},
            raises="input 'Index': expected one of",
            code=Code.DTYPE_MISMATCH,
        ),
    ),
)


@dataclass(frozen=True, slots=True)
class IndexSelectAttrs:
    dim: int = 0


def _index_select_infer(x: TensorType, index: TensorType, a: IndexSelectAttrs) -> Shape:
    if not (index.rank == 1 or (index.rank == 2 and index.shape[1] == 1)):
        raise ShapeError(f"Index: expected dims [n] or [n, 1], got {list(index.shape)}")
    ax = norm_axis(a.dim, x.rank, what="dim")
    _take_count(x, ax, index.shape[0], "X")
    return (*x.shape[:ax], index.shape[0], *x.shape[ax + 1 :])


def _index_select_batch(view: BatchView) -> int:
    return _take_batch(view, norm_axis(view.attrs.dim, view.type("X").rank, what="dim"), True)


INDEX_SELECT = OpDef(
    op_type="index_select",
    doc="Takes the slices of X at the 1-D Index along `dim`.",
    inputs=(In("X"), In("Index", "I")),
    outputs=(Out("Out"),),
    types={"T": ALL, "I": INDICES},
    attrs=IndexSelectAttrs,
    infer=_index_select_infer,
    batch=_index_select_batch,
    cases=(
        Case(
            {"X": f32(5, 3), "Index": i64(4)},
            expect=lambda x, i, a: np.take(x, i.reshape(-1), a.dim),
        ),
        Case(
            {"X": f32(2, 5, 3), "Index": i32(4, 1, high=3)},
            {"dim": -1},
            expect=lambda x, i, a: np.take(x, i.reshape(-1), a.dim),
        ),
        Case(
            {"X": f32(2, 5, 3), "Index": i32(4)},
            {"dim": 3},
            raises="dim must be in [-3, 3), got 3",
            code=Code.AXIS_INVALID,
        ),
        Case(
            {"X": f32(2, 5, 3), "Index": np.array(1, np.int32)},
            raises="Index: expected dims [n] or [n, 1], got []",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"X": f32(2, 5, 3), "Index": i32(2, 2)},
            raises="Index: expected dims [n] or [n, 1], got [2, 2]",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"X": f32(2, 0, 3), "Index": i32(2)},
            {"dim": 1},
            raises="X: expected a non-empty axis 1 to take 2 elements from",
            code=Code.EMPTY_DIM,
        ),
        Case(
            {"X": f32(), "Index": i32(1)},
            raises="dim 0 needs an input of rank >= 1",
            code=Code.AXIS_INVALID,
        ),
    ),
)

# --- lookup_table_v2, one_hot_v2 --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LookupTableV2Attrs:
    padding_idx: int = -1  # -1: no padding row; Paddle writes it as LONG
    # Paddle 2.x exports: a parameter-server lookup is not something a server runs.
    is_distributed: bool = False
    remote_prefetch: bool = False


def _lookup_table_v2_infer(w: TensorType, ids: TensorType, a: LookupTableV2Attrs) -> Shape:
    require_rank(w, [2], "W")
    vocab = w.shape[0]
    if a.is_distributed or a.remote_prefetch:
        raise AttrError("is_distributed and remote_prefetch must be false, got true")
    if a.padding_idx < -1 or (vocab >= 0 and a.padding_idx >= vocab):
        bound = f"in [0, {vocab})" if vocab >= 0 else ">= 0"
        raise AttrError(f"padding_idx must be -1 or {bound}, got {a.padding_idx}")
    if vocab == 0 and 0 not in ids.shape:
        raise EmptyDimError(f"W: expected at least one row to look up, got dims {list(w.shape)}")
    return (*ids.shape, w.shape[1])


def _lookup_table_v2_reference(w: np.ndarray, ids: np.ndarray, a: LookupTableV2Attrs) -> np.ndarray:
    out = np.asarray(w[ids])
    out[ids == a.padding_idx] = 0
    return out


def _lookup_table_batch(view: BatchView) -> int:
    return only(view, "Ids")  # Out is Ids' dims plus the embedding's


LOOKUP_TABLE_V2 = OpDef(
    op_type="lookup_table_v2",
    doc="Embedding lookup: the rows of W at Ids (the padding_idx row reads as zeros).",
    inputs=(In("W"), In("Ids", "I")),
    outputs=(Out("Out"),),
    types={"T": FLOATS, "I": INDICES},
    attrs=LookupTableV2Attrs,
    ignored_attrs=frozenset({"is_sparse"}),  # the gradient's format only
    infer=_lookup_table_v2_infer,
    batch=_lookup_table_batch,
    cases=(
        Case(
            {"W": f32(6, 4), "Ids": i64(2, 3)},
            {"padding_idx": 2},
            expect=_lookup_table_v2_reference,
        ),
        Case({"W": f32(6, 4), "Ids": i32(5)}, expect=_lookup_table_v2_reference),
        Case({"W": f32(6, 4), "Ids": np.array(3, np.int64)}, expect=_lookup_table_v2_reference),
        Case(
            {"W": f32(6, 4), "Ids": np.array([[0, 5], [5, 1]], np.int32)},
            {"padding_idx": 5},
            expect=_lookup_table_v2_reference,
        ),
        Case(
            {"W": f32(6, 4), "Ids": i64(2, 3)},
            {"padding_idx": 6},
            raises="padding_idx must be -1 or in [0, 6), got 6",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {"W": f32(6, 4), "Ids": i64(2, 3)},
            {"padding_idx": -3},
            raises="padding_idx must be -1 or in [0, 6), got -3",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {"W": f32(6, 4, 1), "Ids": i64(3)},
            raises="W: expected rank [2], got 3",
            code=Code.AXIS_INVALID,
        ),
        Case(
            {"W": f32(0, 4), "Ids": i64(3)},
            raises="W: expected at least one row to look up, got dims [0, 4]",
            code=Code.EMPTY_DIM,
        ),
        Case(
            {"W": f32(6, 4), "Ids": i64(3)},
            {"is_distributed": True},
            raises="is_distributed and remote_prefetch must be false",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {"W": f32(6, 4), "Ids": f32(3)},
            raises="input 'Ids': expected one of",
            code=Code.DTYPE_MISMATCH,
        ),
    ),
)


@dataclass(frozen=True, slots=True)
class OneHotV2Attrs:
    depth: int = -1
    dtype: int = int(DType.FP32)  # a VarType number
    allow_out_of_range: bool = False


def _one_hot_v2_infer(
    x: TensorType, depth_tensor: TensorType | None, a: OneHotV2Attrs
) -> TensorType:
    dtype = dtype_attr(a.dtype)
    if depth_tensor is not None:
        # NOTE: the depth attr is ignored then; Paddle records -1 for the new dim.
        depth = _scalar_value(depth_tensor, "depth_tensor")
        if depth is not None and depth <= 0:
            raise ShapeError(f"depth_tensor: expected a depth >= 1, got {depth}")
        return TensorType(dtype, (*x.shape, UNKNOWN if depth is None else depth))
    if a.depth <= 0:
        raise AttrError(f"depth must be > 0, got {a.depth}")
    return TensorType(dtype, (*x.shape, a.depth))


def _one_hot_v2_reference(
    x: np.ndarray, depth_tensor: np.ndarray | None, a: OneHotV2Attrs
) -> np.ndarray:
    depth = a.depth if depth_tensor is None else int(depth_tensor.reshape(-1)[0])
    inside = (x >= 0) & (x < depth)
    out = (x[..., None] == np.arange(depth)) & inside[..., None]
    return np.asarray(out, dtype=DType(a.dtype).numpy)


def _one_hot_batch(view: BatchView) -> int:
    return only(view, "X")  # Out is X's dims plus depth


ONE_HOT_V2 = OpDef(
    op_type="one_hot_v2",
    doc="One-hot encodes the integer X into a new last dim of size `depth` (or depth_tensor).",
    inputs=(In("X", "I"), In("depth_tensor", "D", optional=True)),
    outputs=(Out("Out"),),  # of the dtype attr's type
    types={"I": INDICES, "D": INDICES, "T": ALL},
    attrs=OneHotV2Attrs,
    infer=_one_hot_v2_infer,
    batch=_one_hot_batch,
    cases=(
        Case({"X": i64(2, 3)}, {"depth": 5}, expect=_one_hot_v2_reference),
        Case(
            {"X": i32(4, high=3)},
            {"depth": 3, "dtype": int(DType.INT64)},
            expect=_one_hot_v2_reference,
        ),
        Case(
            {"X": np.array(2, np.int64)},
            {"depth": 4, "dtype": int(DType.BOOL), "allow_out_of_range": True},
            expect=_one_hot_v2_reference,
        ),
        Case(
            {"X": i64(2, 3), "depth_tensor": np.array([6], np.int32)}, expect=_one_hot_v2_reference
        ),
        Case(
            {"X": i64(2, 3), "depth_tensor": np.array(6, np.int64)},
            {"depth": 2},
            expect=_one_hot_v2_reference,
        ),
        Case(
            {"X": np.array([[0, 7, -1]], np.int64)},
            {"depth": 4, "allow_out_of_range": True},
            expect=_one_hot_v2_reference,
        ),
        Case(
            {"X": i64(2, 3)}, {"depth": 0}, raises="depth must be > 0, got 0", code=Code.ATTR_VALUE
        ),
        Case({"X": i64(2, 3)}, {}, raises="depth must be > 0, got -1", code=Code.ATTR_VALUE),
        Case(
            {"X": i64(2, 3), "depth_tensor": np.array([0], np.int32)},
            raises="depth_tensor: expected a depth >= 1, got 0",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"X": i64(2, 3), "depth_tensor": np.array([2, 3], np.int32)},
            raises="depth_tensor: expected dims [1] or [], got [2]",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"X": i64(2, 3)},
            {"depth": 4, "dtype": 99},
            raises="dtype must be a supported VarType number, got 99",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {"X": f32(2, 3)},
            {"depth": 4},
            raises="input 'X': expected one of",
            code=Code.DTYPE_MISMATCH,
        ),
    ),
)

# --- where ------------------------------------------------------------------------------------


def _where_infer(condition: TensorType, x: TensorType, y: TensorType, _a: NoAttrs) -> Shape:
    # NOTE: the where op does not broadcast (paddle.where broadcasts with extra ops before it):
    # Paddle checks equal ranks and equal known dims, and records X's dims.
    if not condition.rank == x.rank == y.rank:
        raise ShapeError(
            f"expected Condition, X and Y of equal rank, got dims {list(condition.shape)}, {list(x.shape)} and {list(y.shape)}"
        )
    what = "Condition, X and Y"
    return tuple(
        merge_dim(merge_dim(c, d, what), e, what)
        for c, d, e in zip(condition.shape, x.shape, y.shape, strict=True)
    )


WHERE = OpDef(
    op_type="where",
    doc="Picks X where Condition is true and Y elsewhere; the three have the same dims.",
    inputs=(In("Condition", DType.BOOL), In("X"), In("Y")),
    outputs=(Out("Out"),),
    types={"T": ALL},
    infer=_where_infer,
    batch=ROWWISE,
    cases=(
        Case(
            {"Condition": boolean(2, 3), "X": f32(2, 3), "Y": f32(2, 3)},
            expect=lambda c, x, y, a: np.where(c, x, y),
        ),
        Case(
            {"Condition": boolean(), "X": i64(), "Y": i64()},
            expect=lambda c, x, y, a: np.where(c, x, y),
        ),
        Case(
            {"Condition": boolean(3, 1), "X": boolean(3, 1), "Y": boolean(3, 1)},
            expect=lambda c, x, y, a: np.where(c, x, y),
        ),
        Case(
            {"Condition": boolean(4), "X": i32(4).astype(np.int16), "Y": i32(4).astype(np.int16)},
            expect=lambda c, x, y, a: np.where(c, x, y),
        ),
        Case(
            {"Condition": boolean(2, 3), "X": f32(2, 3), "Y": f32(2, 4)},
            raises="Condition, X and Y: expected equal sizes, got 3 and 4",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"Condition": boolean(2, 1), "X": f32(2, 3), "Y": f32(2, 3)},
            raises="expected equal sizes, got 1 and 3",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"Condition": boolean(2, 3), "X": f32(2, 3), "Y": f32(3)},
            raises="expected Condition, X and Y of equal rank, got dims [2, 3], [2, 3] and [3]",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"Condition": f32(2, 3), "X": f32(2, 3), "Y": f32(2, 3)},
            raises="input 'Condition': expected bool, got float32",
            code=Code.DTYPE_MISMATCH,
        ),
        Case(
            {"Condition": boolean(2, 3), "X": f32(2, 3), "Y": i64(2, 3)},
            raises="input 'Y': expected float32 like the other T inputs",
            code=Code.DTYPE_MISMATCH,
        ),
    ),
)

OPS = (GATHER, INDEX_SELECT, LOOKUP_TABLE_V2, ONE_HOT_V2, WHERE)
