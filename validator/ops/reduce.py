"""Reductions and scans: reduce_*, logsumexp, p_norm, arg_max/min, top_k_v2, cumsum."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from graph_proto.types import ALL, FLOATS, INDICES, INTEGERS, NUMERIC, UNKNOWN, DType, Shape
from validator.diagnostics import Code
from validator.ops._batch import along, only, reduced
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
    UnsupportedError,
)
from validator.ops._shape import (
    dtype_attr,
    norm_axes,
    norm_axis,
    product,
    require_nonempty,
    require_rank,
)

INT32_MAX: Final = 2**31 - 1
FLOAT_OR_INDEX: Final = FLOATS | INDICES


def f16(*shape: int) -> np.ndarray:
    return f32(*shape).astype(np.float16)


def _f16_ref(fn: Callable[..., Any]) -> Callable[..., np.ndarray]:
    """A float16 reference computed in float32 (as the wider accumulators do) and rounded back."""
    return lambda x, a: np.asarray(fn(x.astype(np.float32), a)).astype(np.float16)


TIES: Final = np.array([[0, 2, 1, 2, 0, 1], [3, 3, -1, 3, -1, 3]], np.float32)


def _input_cost(x: TensorType, *_: Any) -> int:
    """Reductions and scans touch every input element about once."""
    return x.numel()


def _dtype_of(x: np.ndarray) -> DType:
    return next(d for d in DType if d != DType.BF16 and d.numpy == x.dtype)


def _one_axis(axis: int, rank: int) -> int | None:
    """Normalizes one axis; a 0-D input takes 0 or -1 only (None: the whole 0-D tensor)."""
    if rank == 0:
        if axis not in (0, -1):
            raise AxisError(f"axis of a 0-D input must be 0 or -1, got {axis}")
        return None
    return norm_axis(axis, rank)


def _reduced_axes(x: TensorType, axes: Sequence[int], reduce_all: bool) -> tuple[int, ...]:
    """The axes a reduction removes: all of them for reduce_all or an empty list (Paddle's rule)."""
    if x.rank == 0:
        if any(a not in (0, -1) for a in axes):
            raise AxisError(f"axis of a 0-D input must be 0 or -1, got {list(axes)}")
        return ()
    normalized = norm_axes(axes, x.rank)  # NOTE: Paddle checks the axes even with reduce_all
    return tuple(range(x.rank)) if reduce_all or not axes else normalized


def _reduced_shape(x: TensorType, axes: Sequence[int], keep: bool) -> Shape:
    return tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes)


def _np_axes(x: np.ndarray, axes: Sequence[int], reduce_all: bool) -> tuple[int, ...] | None:
    """numpy's axis argument for a reduction (None: every axis)."""
    return None if reduce_all or not axes or x.ndim == 0 else tuple(axes)


# --- reduce_* -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReduceAttrs:
    dim: tuple[int, ...] = (0,)
    keep_dim: bool = False
    reduce_all: bool = False
    in_dtype: int = -1
    out_dtype: int = -1


def _reduce_dtype(x: DType, a: ReduceAttrs, summing: bool) -> DType:
    if a.in_dtype not in (-1, int(x)):
        raise AttrError(f"in_dtype must be -1 or {int(x)} (the dtype of X), got {a.in_dtype}")
    if not summing:
        # NOTE: only reduce_sum honours out_dtype (phi sum_raw); the others keep X's dtype.
        if a.out_dtype not in (-1, int(x)):
            raise AttrError(f"out_dtype must be -1 or {int(x)} (the dtype of X), got {a.out_dtype}")
        return x
    if a.out_dtype != -1:
        return dtype_attr(a.out_dtype, "out_dtype")
    # NOTE: SumRawInferMeta promotes bool and int32 to int64 even when out_dtype is -1.
    return DType.INT64 if x in (DType.BOOL, DType.INT32) else x


def _fold(
    x: TensorType, axes: tuple[int, ...], keep: bool, dtype: DType, fn: Callable[..., Any]
) -> tuple[int, ...] | None:
    """Reduces known small integer values exactly (e.g. the element count of a shape tensor)."""
    if x.value is None or dtype not in INTEGERS or not x.known:
        return None
    values = np.array(x.value, dtype=object).reshape(x.shape)
    result = [int(v) for v in np.asarray(fn(values, axis=axes, keepdims=keep)).reshape(-1)]
    info = np.iinfo(dtype.label)
    return tuple(result) if all(info.min <= v <= info.max for v in result) else None


def _reduce_batch(view: BatchView) -> int:
    x, a = view.type("X"), view.attrs
    return reduced(only(view, "X"), _reduced_axes(x, a.dim, a.reduce_all), a.keep_dim)


def reduction(
    paddle_type: str,
    reference: Callable[..., Any],
    *,
    types: frozenset[DType],
    summing: bool = False,
    nonempty: bool = True,
    fold: Callable[..., Any] | None = None,
    extra: tuple[Case, ...] = (),
) -> OpDef:
    """Declares a reduce_* op; `nonempty` rejects reducing a zero-size axis (mean, max, min)."""

    def infer(x: TensorType, a: ReduceAttrs) -> TensorType:
        axes = _reduced_axes(x, a.dim, a.reduce_all)
        if nonempty:
            require_nonempty(x, axes, "reduced axes")
        dtype = _reduce_dtype(x.dtype, a, summing)
        value = None if fold is None else _fold(x, axes, a.keep_dim, dtype, fold)
        return TensorType(dtype, _reduced_shape(x, axes, a.keep_dim), value)

    def ref(x: np.ndarray, a: ReduceAttrs) -> np.ndarray:
        out = reference(x, axis=_np_axes(x, a.dim, a.reduce_all), keepdims=a.keep_dim)
        return np.asarray(out).astype(_reduce_dtype(_dtype_of(x), a, summing).numpy)

    empty = Case({"X": f32(0, 3)}, {"dim": [0]}, expect=ref)
    if nonempty:
        empty = Case(
            {"X": f32(0, 3)},
            {"dim": [0]},
            raises="expected non-zero dims, got [0, 3]",
            code=Code.EMPTY_DIM,
        )
    name = paddle_type.removeprefix("reduce_")
    return OpDef(
        op_type=paddle_type,
        doc=f"The {name} of X over `dim` (every axis with reduce_all or an empty dim); "
        "keep_dim keeps reduced axes as 1s.",
        inputs=(In("X"),),
        outputs=(Out("Out"),),
        types={"T": types},
        attrs=ReduceAttrs,
        ignored_attrs=frozenset({"use_mkldnn"}),
        infer=infer,
        batch=_reduce_batch,
        cost=_input_cost,
        cases=(
            Case({"X": f32(2, 3, 4)}, {"dim": [1, 2], "keep_dim": True}, expect=ref),
            Case({"X": f32(2, 3, 4)}, {"dim": [-1]}, expect=ref),
            Case({"X": f32(2, 3, 4)}, {"dim": []}, expect=ref),
            Case(
                {"X": f32(2, 3, 4)}, {"dim": [0], "reduce_all": True, "keep_dim": True}, expect=ref
            ),
            Case({"X": f32()}, {"dim": [0], "keep_dim": True}, expect=ref),
            Case({"X": i64(2, 3)}, {"dim": [1]}, expect=ref),
            empty,
            *extra,
            Case(
                {"X": f32(2, 3, 4)},
                {"dim": [3]},
                raises="axis must be in [-3, 3), got 3",
                code=Code.AXIS_INVALID,
            ),
            Case(
                {"X": f32(2, 3, 4)},
                {"dim": [1, -2]},
                raises="axis must not repeat, got [1, -2]",
                code=Code.AXIS_INVALID,
            ),
            Case(
                {"X": f32()},
                {"dim": [1]},
                raises="axis of a 0-D input must be 0 or -1, got [1]",
                code=Code.AXIS_INVALID,
            ),
            Case(
                {"X": f32(2, 3)},
                {"dim": [0], "in_dtype": 6},
                raises="in_dtype must be -1 or 5",
                code=Code.ATTR_VALUE,
            ),
        ),
    )


REDUCE_SUM = reduction(
    "reduce_sum",
    np.sum,
    types=ALL,
    summing=True,
    nonempty=False,
    fold=np.sum,
    extra=(
        Case({"X": i32(2, 3)}, {"dim": [1]}, expect=lambda x, a: x.sum(1).astype(np.int64)),
        Case({"X": boolean(2, 3)}, {"reduce_all": True}, expect=lambda x, a: np.int64(x.sum())),
        Case({"X": f32(2, 3)}, {"dim": [1], "out_dtype": 6}, expect=lambda x, a: x.sum(1, "f8")),
        # NOTE: Paddle casts X to out_dtype first; a bool accumulator makes the sum "any".
        Case(
            {"X": np.array([[1, -1, 0], [0, 0, 0]], np.float32)},
            {"dim": [1], "out_dtype": 0},
            expect=lambda x, a: x.astype(bool).any(1),
        ),
        Case(
            {"X": np.array([[100, 100, 27], [-128, -1, 5]], np.int8)},
            {"dim": [1]},
            expect=lambda x, a: x.sum(1).astype(np.int8),  # wraps like an int8 accumulator
        ),
        Case(
            {"X": f16(2, 3, 4)},
            {"dim": [0, 2], "reduce_all": True},
            expect=_f16_ref(lambda x, a: x.sum()),
            rtol=1e-3,
            atol=1e-3,
        ),
        Case({"X": np.array(7, np.int32)}, {"dim": [0]}, expect=lambda x, a: np.int64(x)),
        Case(
            {"X": boolean(2, 3)},
            {"dim": [0], "keep_dim": True},
            expect=lambda x, a: x.sum(0, "i8", keepdims=True),
        ),
        Case(
            {"X": f32(2, 3)},
            {"out_dtype": 7},
            raises="out_dtype must be a supported VarType",
            code=Code.ATTR_VALUE,
        ),
    ),
)
REDUCE_MEAN = reduction(
    "reduce_mean",
    np.mean,
    types=FLOAT_OR_INDEX,
    extra=(
        Case(
            {"X": f32(2, 3)},
            {"out_dtype": 6},
            raises="out_dtype must be -1 or 5",
            code=Code.ATTR_VALUE,
        ),
        # NOTE: an integer mean truncates toward zero.
        Case(
            {"X": np.array([[-1, -1, -2], [1, 1, 2]], np.int64)},
            {"dim": [1]},
            expect=lambda x, a: np.trunc(x.mean(1)).astype(np.int64),
        ),
        Case({"X": i32(2, 3)}, {"dim": []}, expect=lambda x, a: np.int32(np.trunc(x.mean()))),
        Case(
            {"X": f16(2, 3)},
            {"dim": [1]},
            expect=_f16_ref(lambda x, a: x.mean(1)),
            rtol=1e-3,
            atol=1e-3,
        ),
    ),
)


def _extremum_cases(fn: Callable[..., Any]) -> tuple[Case, ...]:
    return (
        Case({"X": i32(2, 3, 4, high=100)}, {"dim": [0, 2]}, expect=lambda x, a: fn(x, (0, 2))),
        Case(
            {"X": TIES}, {"dim": [1], "keep_dim": True}, expect=lambda x, a: fn(x, 1, keepdims=True)
        ),
        Case({"X": f16(2, 3)}, {"dim": [0]}, expect=lambda x, a: fn(x, 0)),
    )


REDUCE_MAX = reduction(
    "reduce_max", np.max, types=FLOAT_OR_INDEX, fold=np.max, extra=_extremum_cases(np.max)
)
REDUCE_MIN = reduction(
    "reduce_min", np.min, types=FLOAT_OR_INDEX, fold=np.min, extra=_extremum_cases(np.min)
)
REDUCE_PROD = reduction(
    "reduce_prod",
    np.prod,
    types=FLOAT_OR_INDEX,
    nonempty=False,
    fold=np.prod,
    extra=(
        Case({"X": i32(2, 3)}, {"dim": [0, 1]}, expect=lambda x, a: np.int32(x.prod())),
        Case(
            {"X": f16(2, 3)},
            {"dim": [1]},
            expect=_f16_ref(lambda x, a: x.prod(1)),
            rtol=1e-3,
            atol=1e-3,
        ),
    ),
)


# --- logsumexp ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LogsumexpAttrs:
    axis: tuple[int, ...] = (0,)
    keepdim: bool = False
    reduce_all: bool = False


def _logsumexp_infer(x: TensorType, a: LogsumexpAttrs) -> Shape:
    require_rank(x, range(5), "X")  # NOTE: LogsumexpInferMeta supports ranks 0..4 only
    axes = _reduced_axes(x, a.axis, a.reduce_all)
    require_nonempty(x, axes, "reduced axes")
    return _reduced_shape(x, axes, a.keepdim)


def _logsumexp_ref(x: np.ndarray, a: LogsumexpAttrs) -> np.ndarray:
    axes = _np_axes(x, a.axis, a.reduce_all)
    return np.asarray(np.log(np.sum(np.exp(x), axis=axes, keepdims=a.keepdim)), x.dtype)


def _logsumexp_batch(view: BatchView) -> int:
    x, a = view.type("X"), view.attrs
    return reduced(only(view, "X"), _reduced_axes(x, a.axis, a.reduce_all), a.keepdim)


LOGSUMEXP = OpDef(
    op_type="logsumexp",
    doc="log(sum(exp(X))) over `axis` (every axis with reduce_all or an empty axis).",
    inputs=(In("X"),),
    outputs=(Out("Out"),),
    types={"T": FLOATS},
    attrs=LogsumexpAttrs,
    infer=_logsumexp_infer,
    batch=_logsumexp_batch,
    cost=_input_cost,
    cases=(
        Case({"X": f32(2, 3, 4)}, {"axis": [1, 2], "keepdim": True}, expect=_logsumexp_ref),
        Case({"X": f32(2, 3, 4)}, {"axis": [0], "reduce_all": True}, expect=_logsumexp_ref),
        Case({"X": f32()}, {"axis": []}, expect=_logsumexp_ref),
        Case(
            {"X": np.array([[1000.0, 1000.5, -1e30], [-1000.0, -1001.0, -1002.0]], np.float32)},
            {"axis": [-1]},
            expect=lambda x, a: np.logaddexp.reduce(x.astype(np.float64), axis=-1).astype(x.dtype),
        ),
        Case(
            {"X": f32(3, 4).astype(np.float64)},
            {"axis": [0, 1], "keepdim": True},
            expect=_logsumexp_ref,
        ),
        Case(
            {"X": f16(2, 3)}, {"axis": [1]}, expect=_f16_ref(_logsumexp_ref), rtol=1e-3, atol=1e-3
        ),
        Case(
            {"X": f32(2, 3)},
            {"axis": [2]},
            raises="axis must be in [-2, 2), got 2",
            code=Code.AXIS_INVALID,
        ),
        Case(
            {"X": f32(1, 1, 1, 1, 2)},
            {"axis": [4]},
            raises="X: expected rank 0..4, got 5",
            code=Code.AXIS_INVALID,
        ),
        Case(
            {"X": f32(2, 0)},
            {"axis": [1]},
            raises="expected non-zero dims, got [2, 0]",
            code=Code.EMPTY_DIM,
        ),
    ),
)


# --- p_norm -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PNormAttrs:
    porder: float = 2.0
    axis: int = -1
    epsilon: float = 1e-12
    keepdim: bool = False
    asvector: bool = False


def _p_norm_infer(x: TensorType, a: PNormAttrs) -> Shape:
    if math.isnan(a.porder):
        raise AttrError("porder must be a number, got nan")
    if x.rank == 0:
        return ()  # NOTE: PNormInferMeta ignores axis for a 0-D input
    axes = tuple(range(x.rank)) if a.asvector else (norm_axis(a.axis, x.rank),)
    if math.isinf(a.porder):
        # The +-inf norms are the max/min of |X|: undefined over nothing.
        require_nonempty(x, axes, "reduced axes")
    return _reduced_shape(x, axes, a.keepdim)


def p_norm_of_nothing(porder: float) -> float:
    """The norm over zero elements: a sum of nothing (0) to the 1/p, or the max/min of nothing.

    NOTE: Paddle's kernel gives this for a 0-D X without asvector (it reduces over no element;
    X's value is never read)."""
    if math.isinf(porder):
        return -porder
    return math.inf if porder < 0 else 0.0


def _p_norm_ref(x: np.ndarray, a: PNormAttrs) -> np.ndarray:
    if x.ndim == 0 and not a.asvector:
        return np.asarray(p_norm_of_nothing(a.porder), x.dtype)
    axis = None if a.asvector else a.axis
    m = np.abs(x)
    if math.isinf(a.porder):
        out = (np.max if a.porder > 0 else np.min)(m, axis=axis, keepdims=a.keepdim)
    elif a.porder == 0:
        out = np.sum(m != 0, axis=axis, keepdims=a.keepdim)
    else:
        out = np.sum(m**a.porder, axis=axis, keepdims=a.keepdim) ** (1 / a.porder)
    return np.asarray(out).astype(x.dtype)


def _p_norm_batch(view: BatchView) -> int:
    x, a = view.type("X"), view.attrs
    axes = tuple(range(x.rank)) if a.asvector else (norm_axis(a.axis, x.rank),)
    return reduced(only(view, "X"), axes, a.keepdim)


P_NORM = OpDef(
    op_type="p_norm",
    doc="The porder-norm of X along `axis` (of all of X with asvector).",
    inputs=(In("X"),),
    outputs=(Out("Out"),),
    types={"T": FLOATS},
    attrs=PNormAttrs,
    infer=_p_norm_infer,
    batch=_p_norm_batch,
    cost=_input_cost,
    cases=(
        Case({"X": f32(2, 3, 4)}, {"porder": 2.0, "axis": 1}, expect=_p_norm_ref),
        Case({"X": f32(2, 3, 4)}, {"porder": 1.0, "axis": -1, "keepdim": True}, expect=_p_norm_ref),
        Case({"X": f32(2, 3)}, {"asvector": True, "keepdim": True}, expect=_p_norm_ref),
        Case({"X": f32(2, 3)}, {"porder": math.inf, "asvector": True}, expect=_p_norm_ref),
        Case({"X": f32()}, {"axis": 0}, expect=_p_norm_ref),
        Case(
            {"X": np.array([[0, 1.5, -2], [0, 0, 3]], np.float32)},
            {"porder": 0.0},
            expect=_p_norm_ref,
        ),
        Case(
            {"X": f32(3, 4)}, {"porder": -math.inf, "axis": 0, "keepdim": True}, expect=_p_norm_ref
        ),
        Case({"X": f32(2, 3, 4)}, {"porder": 3.0, "asvector": True}, expect=_p_norm_ref),
        Case({"X": f32(2, 5)}, {"porder": -1.5, "axis": 1}, expect=_p_norm_ref, rtol=1e-4),
        Case({"X": np.array(-2.5, np.float32)}, {"porder": 0.0}, expect=_p_norm_ref),
        Case({"X": np.array(-2.5, np.float32)}, {"porder": -1.5}, expect=_p_norm_ref),
        Case({"X": np.array(-2.5, np.float32)}, {"porder": math.inf}, expect=_p_norm_ref),
        Case(
            {"X": np.array(-2.5, np.float32)}, {"porder": 0.0, "asvector": True}, expect=_p_norm_ref
        ),
        Case(
            {"X": np.array(-2.5, np.float32)},
            {"porder": 3.0, "asvector": True},
            expect=_p_norm_ref,
            rtol=1e-4,
        ),
        Case(
            {"X": np.array(-2.5, np.float32)},
            {"porder": 3.0, "keepdim": True},
            expect=_p_norm_ref,
            rtol=1e-4,
        ),
        # NOTE: epsilon only guards Paddle's gradient; the forward result ignores it.
        Case({"X": np.zeros((2, 3), np.float32)}, {"epsilon": 1.0}, expect=_p_norm_ref),
        Case({"X": f32(2, 3).astype(np.float64)}, {"porder": 2.0, "axis": 0}, expect=_p_norm_ref),
        Case({"X": f16(2, 3)}, {"porder": 2.0}, expect=_f16_ref(_p_norm_ref), rtol=1e-3, atol=1e-3),
        Case(
            {"X": f32(2, 3, 4)},
            {"axis": 3},
            raises="axis must be in [-3, 3), got 3",
            code=Code.AXIS_INVALID,
        ),
        Case(
            {"X": f32(2, 3)},
            {"porder": math.nan},
            raises="porder must be a number, got nan",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {"X": f32(0, 3)},
            {"porder": -math.inf, "axis": 0},
            raises="expected non-zero dims",
            code=Code.EMPTY_DIM,
        ),
    ),
)


# --- arg_max / arg_min --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ArgAttrs:
    axis: int
    keepdims: bool = False
    flatten: bool = False
    dtype: int = 3


ARG_DTYPES: Final = {-1: DType.INT64, int(DType.INT32): DType.INT32, int(DType.INT64): DType.INT64}


def _arg_infer(x: TensorType, a: ArgAttrs) -> TensorType:
    dtype = ARG_DTYPES.get(a.dtype)
    if dtype is None:
        raise AttrError(f"dtype must be 2 (int32) or 3 (int64), got {a.dtype}")
    axis = _one_axis(a.axis, x.rank)  # NOTE: checked even with flatten, as Paddle does
    if axis is None or a.flatten:
        require_nonempty(x, None, "X")
        size = product(x.shape)
        # NOTE: Paddle keeps a 0-D input 0-D when flattening, but makes it [1] with keepdims.
        keep = a.keepdims and (x.rank > 0 or not a.flatten)
        shape: Shape = (1,) * max(x.rank, 1) if keep else ()
    else:
        require_nonempty(x, (axis,), "X")
        size = x.shape[axis]
        shape = _reduced_shape(x, (axis,), a.keepdims)
    if dtype == DType.INT32 and size > INT32_MAX:
        raise AttrError(f"dtype int32 cannot index {size} elements; expected dtype 3 (int64)")
    return TensorType(dtype, shape)


def _arg_ref(fn: Callable[..., Any]) -> Callable[..., np.ndarray]:
    def reference(x: np.ndarray, a: ArgAttrs) -> np.ndarray:
        dtype = ARG_DTYPES[a.dtype].numpy
        if x.ndim == 0:
            return np.zeros((1,) if a.keepdims and not a.flatten else (), dtype)
        axis = None if a.flatten else a.axis
        return np.asarray(fn(x, axis=axis, keepdims=a.keepdims)).astype(dtype)

    return reference


def _arg_batch(view: BatchView) -> int:
    x, a = view.type("X"), view.attrs
    axes = tuple(range(x.rank)) if a.flatten else (norm_axis(a.axis, x.rank),)
    return reduced(only(view, "X"), axes, a.keepdims and not a.flatten)


def arg(paddle_type: str, fn: Callable[..., Any]) -> OpDef:
    """Declares arg_max or arg_min: indices along `axis`, of the flattened X with flatten."""
    ref = _arg_ref(fn)
    return OpDef(
        op_type=paddle_type,
        doc=f"Index of the {paddle_type[4:]}imum along `axis` (of the flattened X with flatten), "
        "as int64 or, with dtype 2, int32.",
        inputs=(In("X"),),
        outputs=(Out("Out", DType.INT64),),
        types={"T": NUMERIC},
        attrs=ArgAttrs,
        infer=_arg_infer,
        batch=_arg_batch,
        cost=_input_cost,
        cases=(
            Case({"X": f32(2, 3, 4)}, {"axis": 1}, expect=ref),
            Case({"X": f32(2, 3, 4)}, {"axis": -1, "keepdims": True, "dtype": 2}, expect=ref),
            Case({"X": f32(2, 3, 4)}, {"axis": 0, "flatten": True}, expect=ref),
            Case({"X": f32(2, 3)}, {"axis": 0, "flatten": True, "keepdims": True}, expect=ref),
            Case({"X": i64(5)}, {"axis": 0, "dtype": -1}, expect=ref),
            Case({"X": f32()}, {"axis": -1, "keepdims": True}, expect=ref),
            # NOTE: Paddle picks the first index among equal values.
            Case({"X": TIES}, {"axis": 1}, expect=ref),
            Case({"X": TIES}, {"axis": 0, "flatten": True, "dtype": 2}, expect=ref),
            Case({"X": TIES.astype(np.int16)}, {"axis": -1, "keepdims": True}, expect=ref),
            Case({"X": TIES.astype(np.float16)}, {"axis": 0}, expect=ref),
            Case({"X": np.array([[3, 200], [200, 7]], np.uint8)}, {"axis": 1}, expect=ref),
            Case({"X": f32()}, {"axis": 0, "flatten": True, "keepdims": True}, expect=ref),
            Case({"X": f32(2, 3, 4)}, {"axis": 1, "flatten": True, "keepdims": True}, expect=ref),
            Case(
                {"X": f32(2, 3)},
                {"axis": 1, "dtype": 5},
                raises="dtype must be 2 (int32) or 3",
                code=Code.ATTR_VALUE,
            ),
            Case(
                {"X": f32(2, 3)},
                {"axis": 2},
                raises="axis must be in [-2, 2), got 2",
                code=Code.AXIS_INVALID,
            ),
            Case(
                {"X": f32()},
                {"axis": 1},
                raises="axis of a 0-D input must be 0 or -1, got 1",
                code=Code.AXIS_INVALID,
            ),
            Case(
                {"X": f32(0, 3)},
                {"axis": 0},
                raises="expected non-zero dims, got [0, 3]",
                code=Code.EMPTY_DIM,
            ),
        ),
    )


ARG_MAX = arg("arg_max", np.argmax)
ARG_MIN = arg("arg_min", np.argmin)


# --- top_k_v2 -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopKAttrs:
    k: int = 1
    axis: int = -1
    largest: bool = True
    sorted: bool = True


def _k_of(k_tensor: TensorType | None, a: TopKAttrs) -> int:
    """k from the K tensor when given (its value when known, else UNKNOWN), else the attr."""
    if k_tensor is None:
        return a.k
    if product(k_tensor.shape) not in (1, UNKNOWN):
        raise ShapeError(f"K: expected 1 element, got dims {list(k_tensor.shape)}")
    if k_tensor.value is None:  # threats.md 7.12: k must be a constant, checked before running
        raise AttrError("K: expected a constant k, got a value known only at run time")
    return int(k_tensor.value[0])


def _top_k_v2_infer(x: TensorType, k_tensor: TensorType | None, a: TopKAttrs) -> list[Shape]:
    if not a.sorted:
        # NOTE: Paddle's CPU kernel orders an unsorted result as std::nth_element leaves it.
        raise UnsupportedError(
            "sorted must be true: the order of an unsorted top_k is Paddle's kernel's own, got false"
        )
    axis = _one_axis(a.axis, x.rank)
    k = _k_of(k_tensor, a)
    if k != UNKNOWN and k < 1:
        raise AttrError(f"k must be >= 1, got {k}")
    if axis is None:
        if k not in (1, UNKNOWN):
            raise ShapeError(f"k must be 1 for a 0-D input, got {k}")
        return [(), ()]
    size = x.shape[axis]
    require_nonempty(x, (axis,), "X")
    if k > size >= 0:
        raise ShapeError(f"k must be <= {size} (the size of axis {axis}), got {k}")
    shape = (*x.shape[:axis], k, *x.shape[axis + 1 :])
    return [shape, shape]


def _top_k_v2_ref(x: np.ndarray, k: np.ndarray | None, a: TopKAttrs) -> tuple[np.ndarray, ...]:
    count = a.k if k is None else int(k.reshape(-1)[0])
    if x.ndim == 0:
        return x.copy(), np.zeros((), np.int64)
    order = np.argsort(-x if a.largest else x, axis=a.axis, kind="stable")
    indices = np.take(order, np.arange(count), axis=a.axis)
    return np.take_along_axis(x, indices, axis=a.axis), indices.astype(np.int64)


def _top_k_batch(view: BatchView) -> int:
    axis = only(view, "X")
    return along(axis, view.attrs.axis, view.type("X").rank, "ranks across the batch dimension")


TOP_K_V2 = OpDef(
    op_type="top_k_v2",
    doc="The k largest (or smallest) values along `axis` and their int64 indices; k comes from "
    "the K tensor when given.",
    inputs=(In("X"), In("K", "K", optional=True)),
    outputs=(Out("Out"), Out("Indices", DType.INT64)),
    types={"T": FLOAT_OR_INDEX, "K": INDICES},
    attrs=TopKAttrs,
    infer=_top_k_v2_infer,
    batch=_top_k_batch,
    cost=_input_cost,
    cases=(
        Case({"X": f32(2, 3, 4)}, {"k": 2, "axis": 1}, expect=_top_k_v2_ref),
        Case({"X": f32(2, 5)}, {"k": 3, "largest": False}, expect=_top_k_v2_ref),
        Case({"X": f32(2, 5), "K": np.array([4], np.int32)}, {"k": 1}, expect=_top_k_v2_ref),
        Case({"X": f32()}, {"k": 1, "axis": 0}, expect=_top_k_v2_ref),
        Case(
            {"X": f32(4, 3), "K": np.array(2, np.int64)},
            {"axis": 0, "largest": False},
            expect=_top_k_v2_ref,
        ),
        Case({"X": i32(3, 6, high=100)}, {"k": 6}, expect=_top_k_v2_ref),
        Case({"X": f16(2, 5)}, {"k": 2, "axis": -1}, expect=_top_k_v2_ref),
        Case({"X": f32(5).astype(np.float64)}, {"k": 5, "largest": False}, expect=_top_k_v2_ref),
        Case({"X": f32(2, 3)}, {"k": 0}, raises="k must be >= 1, got 0", code=Code.ATTR_VALUE),
        Case(
            {"X": f32(2, 3)},
            {"k": 4},
            raises="k must be <= 3 (the size of axis 1), got 4",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"X": f32(2, 3), "K": np.array([5], np.int64)},
            raises="k must be <= 3",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"X": f32(2, 3), "K": np.array([1, 2], np.int32)},
            raises="K: expected 1 element",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"X": f32(2, 3)},
            {"axis": 2},
            raises="axis must be in [-2, 2), got 2",
            code=Code.AXIS_INVALID,
        ),
        Case({"X": f32(2, 0)}, raises="expected non-zero dims, got [2, 0]", code=Code.EMPTY_DIM),
        Case(
            {"X": f32()},
            {"k": 2, "axis": 0},
            raises="k must be 1 for a 0-D input, got 2",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"X": f32(2, 3)},
            {"k": 2, "sorted": False},
            raises="sorted must be true",
            code=Code.LOWERING_UNSUPPORTED,
        ),
    ),
)


# --- cumsum -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CumsumAttrs:
    axis: int = -1
    flatten: bool = False
    exclusive: bool = False
    reverse: bool = False


def _cumsum_infer(x: TensorType, a: CumsumAttrs) -> Shape:
    if a.flatten:
        # NOTE: Paddle ignores axis here and records product(dims) even with -1 dims
        # (e.g. -12 for [-1, 3, 4]); the length is unknown then.
        return (product(x.shape),)
    _one_axis(a.axis, x.rank)
    return x.shape


def _cumsum_ref(x: np.ndarray, a: CumsumAttrs) -> np.ndarray:
    data, axis = (x.reshape(-1), 0) if a.flatten or x.ndim == 0 else (x, a.axis)
    if a.reverse:
        data = np.flip(data, axis)
    out = np.cumsum(data, axis=axis, dtype=x.dtype)
    if a.exclusive:
        out = out - data
    if a.reverse:
        out = np.flip(out, axis)
    return out if a.flatten else out.reshape(x.shape)


def _cumsum_batch(view: BatchView) -> int:
    axis = only(view, "X")
    if view.attrs.flatten:
        raise Couples("flattens the batch dimension into one running sum")
    return along(
        axis, view.attrs.axis, view.type("X").rank, "accumulates along the batch dimension"
    )


CUMSUM = OpDef(
    op_type="cumsum",
    doc="Running sum along `axis` (of the flattened X with flatten); exclusive drops the current "
    "element, reverse sums from the end.",
    inputs=(In("X"),),
    outputs=(Out("Out"),),
    types={"T": FLOAT_OR_INDEX},
    attrs=CumsumAttrs,
    infer=_cumsum_infer,
    batch=_cumsum_batch,
    cases=(
        Case({"X": f32(2, 3, 4)}, {"axis": 1}, expect=_cumsum_ref),
        Case({"X": f32(2, 3, 4)}, {"flatten": True}, expect=_cumsum_ref),
        Case(
            {"X": i64(2, 3)}, {"axis": -1, "exclusive": True, "reverse": True}, expect=_cumsum_ref
        ),
        Case({"X": f32()}, {"axis": 0}, expect=_cumsum_ref),
        Case({"X": f32()}, {"flatten": True}, expect=_cumsum_ref),
        Case({"X": f32(2, 3, 4)}, {"axis": 0, "exclusive": True}, expect=_cumsum_ref),
        Case({"X": f32(2, 3, 4)}, {"axis": -2, "reverse": True}, expect=_cumsum_ref),
        Case(
            {"X": i32(2, 3, 4)},
            {"flatten": True, "reverse": True, "exclusive": True},
            expect=_cumsum_ref,
        ),
        Case({"X": f16(2, 5)}, {"axis": 1}, expect=_f16_ref(_cumsum_ref), rtol=1e-3, atol=1e-3),
        Case(
            {"X": f32(2, 3)},
            {"axis": 2},
            raises="axis must be in [-2, 2), got 2",
            code=Code.AXIS_INVALID,
        ),
        Case(
            {"X": f32()},
            {"axis": 1},
            raises="axis of a 0-D input must be 0 or -1, got 1",
            code=Code.AXIS_INVALID,
        ),
    ),
)

OPS = (
    REDUCE_SUM,
    REDUCE_MEAN,
    REDUCE_MAX,
    REDUCE_MIN,
    REDUCE_PROD,
    LOGSUMEXP,
    P_NORM,
    ARG_MAX,
    ARG_MIN,
    TOP_K_V2,
    CUMSUM,
)
