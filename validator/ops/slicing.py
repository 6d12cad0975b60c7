"""Ops that select, write or repeat parts of a tensor: slice, strided_slice, set_value,
expand_v2, tile."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from graph_proto import framework_pb2 as pb
from graph_proto.builder import Attr
from graph_proto.types import ALL, FLOATS, UNKNOWN, DType, Shape, numel
from validator.diagnostics import Code
from validator.ops._batch import only
from validator.ops._cases import f32, i32, i64
from validator.ops._def import (
    AttrError,
    AxisError,
    BatchView,
    Case,
    Couples,
    In,
    OpDef,
    Out,
    Scalar,
    ShapeError,
    TensorType,
    UnsupportedError,
)
from validator.ops._operands import (
    BACKEND_ATTRS,
    Operand,
    carry,
    carry_selection,
    check_rank,
    int_operand,
)
from validator.ops._shape import dtype_attr


def _floats(*shape: int) -> np.ndarray:
    """Deterministic values, so that added cases leave the shared generator's order alone."""
    return np.asarray(np.arange(int(np.prod(shape))).reshape(shape) / 4 - 1, np.float32)


def _bools(*shape: int) -> np.ndarray:
    return np.asarray(np.arange(int(np.prod(shape))).reshape(shape) % 3 == 0)


# --- slice, strided_slice ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SliceAttrs:
    axes: tuple[int, ...]
    starts: tuple[int, ...] = ()
    ends: tuple[int, ...] = ()
    infer_flags: tuple[int, ...] = ()
    decrease_axis: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class StridedSliceAttrs:
    axes: tuple[int, ...]
    starts: tuple[int, ...] = ()
    ends: tuple[int, ...] = ()
    strides: tuple[int, ...] = ()
    infer_flags: tuple[int, ...] = ()
    decrease_axis: tuple[int, ...] = ()


def _window(size: int, start: int | None, end: int | None, step: int | None) -> int:
    """How many elements x[start:end:step] keeps of `size`: Python's clamping, as Paddle 3.x."""
    if size < 0 or start is None or end is None or step is None:
        return UNKNOWN
    first, stop, step = slice(start, end, step).indices(size)
    return max(0, (stop - first + step - (1 if step > 0 else -1)) // step)


def _check_axes(axes: Sequence[int], rank: int, what: str) -> None:
    # NOTE: Paddle's slice kernels ignore a negative axis that compile time normalized.
    for axis in axes:
        if not 0 <= axis < rank:
            raise AxisError(f"{what} must be in [0, {rank}), got {axis}")
    if len(set(axes)) != len(axes):
        raise AxisError(f"{what} must not repeat, got {list(axes)}")


def _sliced(
    x: TensorType,
    a: SliceAttrs | StridedSliceAttrs,
    starts: Operand,
    ends: Operand,
    steps: Operand,
) -> Shape | TensorType:
    """Shape (and values) of x sliced on a.axes, then with a.decrease_axis dropped."""
    _check_axes(a.axes, x.rank, "axes")
    flags = a.infer_flags or (1,) * len(a.axes)
    for name, given in (
        ("starts", starts),
        ("ends", ends),
        ("strides", steps),
        ("infer_flags", flags),
    ):
        if len(given) != len(a.axes):
            raise AttrError(f"expected {len(a.axes)} {name} like axes, got {list(given)}")
    if 0 in steps:
        raise AttrError(f"expected non-zero strides, got {steps}")
    dims, index = list(x.shape), [slice(None)] * x.rank
    for i, axis in enumerate(a.axes):
        start, end, step = starts[i], ends[i], steps[i]
        quirk = (start, end, flags[i]) == (-1, 0, -1) and axis in a.decrease_axis
        if isinstance(a, StridedSliceAttrs) and quirk:  # NOTE: its kernel reads this as x[-1]
            start, end, step = -1, x.shape[axis], 1
        dims[axis] = _window(x.shape[axis], start, end, step)
        index[axis] = slice(start, end, step)
    _check_axes(a.decrease_axis, x.rank, "decrease_axis")
    for axis in a.decrease_axis:
        if dims[axis] not in (1, UNKNOWN):
            raise ShapeError(f"decrease_axis {axis}: expected a size of 1, got {dims[axis]}")
    out = tuple(d for i, d in enumerate(dims) if i not in a.decrease_axis)
    if None in (*starts, *ends, *steps):
        return out  # values would need the unknown bounds
    return carry_selection(x, out, lambda v: v[tuple(index)])


def _slice_infer(
    x: TensorType,
    starts_tensor: TensorType | None,
    ends_tensor: TensorType | None,
    starts_list: tuple[TensorType, ...] | None,
    ends_list: tuple[TensorType, ...] | None,
    a: SliceAttrs,
) -> Shape | TensorType:
    starts = int_operand(
        a.starts, ("StartsTensor", starts_tensor), ("StartsTensorList", starts_list)
    )
    ends = int_operand(a.ends, ("EndsTensor", ends_tensor), ("EndsTensorList", ends_list))
    return _sliced(x, a, starts, ends, [1] * len(a.axes))


def _slice_ref(
    x: np.ndarray, st: Any, et: Any, sl: Any, el: Any, a: Any, steps: Any = None
) -> np.ndarray:
    starts = st.tolist() if st is not None else [t.item() for t in sl] if sl else a.starts
    ends = et.tolist() if et is not None else [t.item() for t in el] if el else a.ends
    index = [slice(None)] * x.ndim
    for axis, start, end, step in zip(
        a.axes, starts, ends, steps or [1] * len(a.axes), strict=True
    ):
        index[axis] = slice(start, end, step)
    y = x[tuple(index)]
    return y.reshape([d for i, d in enumerate(y.shape) if i not in a.decrease_axis])


_WHOLE: Final = 2**31 - 1  # an end at least this large keeps the whole dim


def _slice_batch(view: BatchView) -> int:
    """slice and strided_slice: rows apart unless the batch dim is cut, stepped or dropped."""
    axis = only(view, "Input")
    a = view.attrs
    rank = view.type("Input").rank
    axes = [ax + rank if ax < 0 else ax for ax in a.axes]  # Paddle lets an axis repeat
    by_tensor = any(t for s, t in view.types_in.items() if s != "Input")
    strides = getattr(a, "strides", ()) or (1,) * len(axes)
    for i in (i for i, ax in enumerate(axes) if ax == axis):
        whole = not by_tensor and a.starts[i] == 0 and a.ends[i] >= _WHOLE and strides[i] == 1
        if not whole:
            raise Couples("slices the batch dimension")
    if axis in a.decrease_axis:
        raise Couples("drops the batch dimension")
    return axis - sum(1 for d in a.decrease_axis if d < axis)


SLICE = OpDef(
    op_type="slice",
    doc="Takes Input[starts:ends] on each of `axes` (clamped as Python does), then drops decrease_axis.",
    inputs=(
        In("Input"),
        In("StartsTensor", None, optional=True),
        In("EndsTensor", None, optional=True),
        In("StartsTensorList", None, variadic=True, optional=True),
        In("EndsTensorList", None, variadic=True, optional=True),
    ),
    outputs=(Out("Out"),),
    types={"T": ALL},
    attrs=SliceAttrs,
    ignored_attrs=BACKEND_ATTRS,
    infer=_slice_infer,
    batch=_slice_batch,
    cases=(
        Case(
            {"Input": f32(3, 6, 4)},
            {"axes": [0, 1], "starts": [1, 0], "ends": [2**31 - 1, -1]},
            expect=_slice_ref,
        ),
        Case(
            {"Input": f32(3, 6)},
            {"axes": [1], "starts": [0], "ends": [1], "decrease_axis": [1]},
            expect=_slice_ref,
        ),
        Case(
            {"Input": i64(3)},
            {"axes": [0], "starts": [1], "ends": [2], "decrease_axis": [0]},
            expect=_slice_ref,
        ),
        Case(
            {"Input": f32(5, 6)}, {"axes": [1], "starts": [-100], "ends": [100]}, expect=_slice_ref
        ),
        Case({"Input": f32(5, 6)}, {"axes": [1], "starts": [4], "ends": [2]}, expect=_slice_ref),
        Case(
            {"Input": _bools(3, 4)},
            {"axes": [0, 1], "starts": [-1, 2], "ends": [2**31 - 1, 3], "decrease_axis": [0, 1]},
            expect=_slice_ref,
        ),
        Case(
            {"Input": _floats(2, 0, 3)},
            {"axes": [1, 2], "starts": [0, -2], "ends": [5, 100]},
            expect=_slice_ref,
        ),
        Case(
            {
                "Input": f32(5, 6),
                "StartsTensor": np.array([2], np.int64),
                "EndsTensorList": (i32(1, high=1) + 5,),
            },
            {"axes": [1], "starts": [-1], "ends": [-1], "infer_flags": [-1]},
            expect=_slice_ref,
        ),
        Case(
            {"Input": f32(5, 6)},
            {"axes": [-1], "starts": [0], "ends": [2]},
            raises="axes must be in [0, 2), got -1",
            code=Code.AXIS_INVALID,
        ),
        Case(
            {"Input": f32(5, 6)},
            {"axes": [1, 1], "starts": [0, 0], "ends": [2, 2]},
            raises="must not repeat",
            code=Code.AXIS_INVALID,
        ),
        Case(
            {"Input": f32(5, 6)},
            {"axes": [1], "starts": [0, 1], "ends": [2]},
            raises="expected 1 starts like axes",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {"Input": f32(5, 6)},
            {"axes": [1], "starts": [0], "ends": [2], "decrease_axis": [1]},
            raises="decrease_axis 1: expected a size of 1, got 2",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"Input": f32()},
            {"axes": [0], "starts": [0], "ends": [1]},
            raises="axes must be in [0, 0)",
            code=Code.AXIS_INVALID,
        ),
    ),
)


def _strided_slice_infer(
    x: TensorType,
    starts_tensor: TensorType | None,
    starts_list: tuple[TensorType, ...] | None,
    ends_tensor: TensorType | None,
    ends_list: tuple[TensorType, ...] | None,
    strides_tensor: TensorType | None,
    strides_list: tuple[TensorType, ...] | None,
    a: StridedSliceAttrs,
) -> Shape | TensorType:
    starts = int_operand(
        a.starts, ("StartsTensor", starts_tensor), ("StartsTensorList", starts_list)
    )
    ends = int_operand(a.ends, ("EndsTensor", ends_tensor), ("EndsTensorList", ends_list))
    steps = int_operand(
        a.strides, ("StridesTensor", strides_tensor), ("StridesTensorList", strides_list)
    )
    return _sliced(x, a, starts, ends, steps)


def _strided_ref(
    x: np.ndarray, st: Any, sl: Any, et: Any, el: Any, tt: Any, tl: Any, a: Any
) -> np.ndarray:
    steps = tt.tolist() if tt is not None else [t.item() for t in tl] if tl else a.strides
    return _slice_ref(x, st, et, sl, el, a, steps)


STRIDED_SLICE = OpDef(
    op_type="strided_slice",
    doc="Takes Input[starts:ends:strides] on each of `axes` (strides may be negative), then drops decrease_axis.",
    inputs=(
        In("Input"),
        In("StartsTensor", None, optional=True),
        In("StartsTensorList", None, variadic=True, optional=True),
        In("EndsTensor", None, optional=True),
        In("EndsTensorList", None, variadic=True, optional=True),
        In("StridesTensor", None, optional=True),
        In("StridesTensorList", None, variadic=True, optional=True),
    ),
    outputs=(Out("Out"),),
    types={"T": ALL},
    attrs=StridedSliceAttrs,
    ignored_attrs=BACKEND_ATTRS,
    infer=_strided_slice_infer,
    batch=_slice_batch,
    cases=(
        Case(
            {"Input": f32(3, 6, 4)},
            {"axes": [1, 2], "starts": [5, 3], "ends": [0, 0], "strides": [-1, -2]},
            expect=_strided_ref,
        ),
        Case(
            {"Input": f32(6)},
            {"axes": [0], "starts": [2**31 - 1], "ends": [-(2**31)], "strides": [-1]},
            expect=_strided_ref,
        ),
        Case(
            {"Input": f32(6)},
            {"axes": [0], "starts": [-10], "ends": [20], "strides": [4]},
            expect=_strided_ref,
        ),
        Case(
            {"Input": f32(6)},
            {"axes": [0], "starts": [1], "ends": [4], "strides": [-1]},
            expect=_strided_ref,
        ),
        # onnxruntime clamps a start before index 0 to 0 and reads an end of INT32_MAX as
        # "past index 0" for a negative stride; Python (and Paddle) take nothing in both.
        Case(
            {"Input": _floats(6)},
            {"axes": [0], "starts": [-10], "ends": [-(2**31)], "strides": [-1]},
            expect=_strided_ref,
        ),
        Case(
            {"Input": _floats(6)},
            {"axes": [0], "starts": [3], "ends": [2**31 - 1], "strides": [-2]},
            expect=_strided_ref,
        ),
        Case(
            {"Input": _floats(6, 4)},
            {"axes": [0, 1], "starts": [-7, -1], "ends": [0, -5], "strides": [-1, -3]},
            expect=_strided_ref,
        ),
        Case(
            {"Input": _floats(0, 4)},
            {"axes": [0, 1], "starts": [-1, 3], "ends": [-100, 0], "strides": [-1, -1]},
            expect=_strided_ref,
        ),
        Case(
            {
                "Input": _bools(5, 6),
                "StartsTensorList": (np.array([4], np.int64),),
                "EndsTensor": np.array([-100], np.int32),
                "StridesTensorList": (np.array(-2, np.int32),),
            },
            {"axes": [1], "starts": [-1], "ends": [-1], "strides": [-1], "infer_flags": [-1]},
            expect=_strided_ref,
        ),
        Case(
            {"Input": f32(5, 6)},
            {"axes": [1], "starts": [2], "ends": [3], "strides": [1], "decrease_axis": [1]},
            expect=_strided_ref,
        ),
        Case(
            {"Input": f32(5, 6), "StridesTensor": np.array([-2], np.int32)},
            {"axes": [1], "starts": [-1], "ends": [-100], "strides": [1], "infer_flags": [-1]},
            expect=_strided_ref,
        ),
        Case(
            {"Input": f32(5, 6)},
            {"axes": [1], "starts": [-1], "ends": [0], "strides": [1], "infer_flags": [-1]}
            | {"decrease_axis": [1]},
            expect=lambda x, *_: x[:, -1],  # Paddle's placeholder bounds for x[:, -1]
        ),
        Case(
            {"Input": f32(6)},
            {"axes": [0], "starts": [0], "ends": [6], "strides": [0]},
            raises="expected non-zero strides",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {"Input": f32(6)},
            {"axes": [0], "starts": [0], "ends": [6], "strides": []},
            raises="expected 1 strides like axes",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {"Input": f32(5, 6)},
            {"axes": [-1], "starts": [0], "ends": [6], "strides": [2]},
            raises="axes must be in [0, 2)",
            code=Code.AXIS_INVALID,
        ),
    ),
)

# --- set_value ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SetValueAttrs:
    axes: tuple[int, ...]
    starts: tuple[int, ...] = ()
    ends: tuple[int, ...] = ()
    steps: tuple[int, ...] = ()
    decrease_axes: tuple[int, ...] = ()
    none_axes: tuple[int, ...] = ()
    shape: tuple[int, ...] = ()
    dtype: int = 5
    # Paddle 3.x writes the value as `values` (SCALARS); 2.x programs one typed list instead.
    values: tuple[int | float | bool, ...] = ()
    bool_values: tuple[int, ...] = ()
    fp16_values: tuple[float, ...] = ()
    fp32_values: tuple[float, ...] = ()
    fp64_values: tuple[float, ...] = ()
    int32_values: tuple[int, ...] = ()
    int64_values: tuple[int, ...] = ()


_VALUE_LISTS = (
    "values",
    "bool_values",
    "fp16_values",
    "fp32_values",
    "fp64_values",
    "int32_values",
    "int64_values",
)


def set_value_constant(a: SetValueAttrs, dtype: DType) -> np.ndarray:
    """The value given by attributes, of shape `shape`, converted to X's dtype as the kernel does."""
    given = [name for name in _VALUE_LISTS if getattr(a, name)]
    if len(given) > 1:
        raise AttrError(f"expected the value in one of {list(_VALUE_LISTS)}, got {given}")
    values: tuple[Scalar, ...] = getattr(a, given[0]) if given else ()
    if dtype == DType.BF16:
        raise UnsupportedError("expected a ValueTensor for a bfloat16 Input, got constant values")
    if any(d < 0 for d in a.shape):
        raise AttrError(f"expected a value shape of sizes >= 0, got {list(a.shape)}")
    if len(values) != numel(a.shape):
        raise AttrError(
            f"expected {numel(a.shape)} values for shape {list(a.shape)}, got {len(values)}"
        )
    raw = np.array(values, np.float64 if dtype in FLOATS else object)
    if dtype not in FLOATS and dtype != DType.BOOL:
        info = np.iinfo(dtype.label)
        if any(not np.isfinite(float(v)) or not info.min <= int(v) <= info.max for v in values):
            raise AttrError(f"expected values that fit {dtype.label}, got {list(values)}")
        raw = np.array([int(v) for v in values], np.int64)  # NOTE: C++ casts truncate
    return raw.astype(dtype.numpy).reshape(a.shape)


def set_value_steps(a: SetValueAttrs) -> tuple[int, ...]:
    """Paddle's default step is 1 on every axis."""
    return a.steps or (1,) * len(a.axes)


def set_value_assign_axes(a: SetValueAttrs, rank: int) -> list[int | None]:
    """The dims the value is broadcast to, as axes of the slice (None: an inserted 1): the
    slice's dims without decrease_axes and with a 1 for each of none_axes, placed as Paddle's
    kernel places them (set_value_kernel_impl.h)."""
    axes: list[int | None] = []
    pending = sorted(a.none_axes)
    for i in range(rank):
        while pending and pending[0] <= i:
            axes.append(None)
            pending.pop(0)
        if i not in a.decrease_axes:
            axes.append(i)
    return axes + [None] * len(pending)


def set_value_assign_shape(a: SetValueAttrs, slice_dims: Sequence[int]) -> list[int]:
    """The shape the value is broadcast to (see set_value_assign_axes)."""
    axes = set_value_assign_axes(a, len(slice_dims))
    return [1 if axis is None else slice_dims[axis] for axis in axes]


def _check_broadcast(value: Shape, target: Sequence[int]) -> None:
    """NumPy broadcasting of the value to the slice (extra leading 1s allowed)."""
    lead = len(value) - len(target)
    if any(d != 1 for d in value[: max(lead, 0)]):
        raise ShapeError(f"expected a value broadcastable to {list(target)}, got {list(value)}")
    for v, t in zip(reversed(value), reversed(target), strict=False):
        if v not in (1, UNKNOWN) and t != UNKNOWN and v != t:
            raise ShapeError(f"expected a value broadcastable to {list(target)}, got {list(value)}")


def _set_value_infer(
    x: TensorType,
    value: TensorType | None,
    starts_list: tuple[TensorType, ...] | None,
    ends_list: tuple[TensorType, ...] | None,
    steps_list: tuple[TensorType, ...] | None,
    a: SetValueAttrs,
) -> Shape:
    _check_axes(a.axes, x.rank, "axes")
    starts = int_operand(a.starts, ("StartsTensorList", starts_list))
    ends = int_operand(a.ends, ("EndsTensorList", ends_list))
    steps = int_operand(set_value_steps(a), ("StepsTensorList", steps_list))
    for name, given in (("starts", starts), ("ends", ends), ("steps", steps)):
        if len(given) != len(a.axes):
            raise AttrError(f"expected {len(a.axes)} {name} like axes, got {list(given)}")
    if 0 in steps:
        raise AttrError(f"expected non-zero steps, got {steps}")
    dims = list(x.shape)
    for axis, start, end, step in zip(a.axes, starts, ends, steps, strict=True):
        dims[axis] = _window(x.shape[axis], start, end, step)
    _check_axes(a.decrease_axes, x.rank, "decrease_axes")
    for axis in a.decrease_axes:
        if dims[axis] not in (1, UNKNOWN):
            raise ShapeError(f"decrease_axes {axis}: expected a size of 1, got {dims[axis]}")
    if any(not 0 <= axis <= x.rank + len(a.none_axes) for axis in a.none_axes):
        raise AxisError(f"none_axes must be in [0, {x.rank + len(a.none_axes)}]")
    target = set_value_assign_shape(a, dims)
    check_rank(len(target))
    value_shape = value.shape if value is not None else set_value_constant(a, x.dtype).shape
    _check_broadcast(value_shape, target)
    dtype_attr(a.dtype)
    return x.shape


def _set_value_ref(x: np.ndarray, value: Any, sl: Any, el: Any, tl: Any, a: Any) -> np.ndarray:
    starts = [t.item() for t in sl] if sl else a.starts
    ends = [t.item() for t in el] if el else a.ends
    steps = [t.item() for t in tl] if tl else set_value_steps(a)
    index = [slice(None)] * x.ndim
    for axis, start, end, step in zip(a.axes, starts, ends, steps, strict=True):
        index[axis] = slice(start, end, step)
    out = x.copy()
    target = out[tuple(index)]
    dtype = next(d for d in DType if d != DType.BF16 and d.numpy == x.dtype)
    given = value if value is not None else set_value_constant(a, dtype)
    fill = np.broadcast_to(given, set_value_assign_shape(a, target.shape))
    out[tuple(index)] = fill.reshape(target.shape)
    return out


_BOUND_LISTS: Final = ("StartsTensorList", "EndsTensorList", "StepsTensorList")


def _set_value_batch(view: BatchView) -> int:
    """Rows stay apart when the slice keeps the batch dim whole and the value is either per row
    (batched, landing on the slice's batch axis) or shared (size 1 there)."""
    if lists := [s for s in _BOUND_LISTS if s in view.batched()]:
        raise Couples(f"takes slice bounds from batched {lists[0]!r}")
    axis = view.axis("Input")
    if axis is None:
        raise Couples("writes a batched 'ValueTensor' into an unbatched Input")
    a = view.attrs
    by_tensor = any(view.types_in.get(s) for s in _BOUND_LISTS)
    for i in (i for i, ax in enumerate(a.axes) if ax == axis):
        step = set_value_steps(a)[i]
        whole = not by_tensor and a.starts[i] == 0 and a.ends[i] >= _WHOLE and step == 1
        if not whole:
            raise Couples("writes into a slice of the batch dimension")
    if axis in a.decrease_axes:
        raise Couples("drops the batch dimension of the slice")
    target = set_value_assign_axes(a, view.type("Input").rank)
    _value_per_row(view, target.index(axis), len(target))
    return axis


def _value_per_row(view: BatchView, at: int, rank: int) -> None:
    """The value, right-aligned to the slice's `rank` dims, meets the batch at axis `at`."""
    given = view.types_in.get("ValueTensor", ())
    dims = given[0].shape if given else view.attrs.shape
    value_axis = view.axis("ValueTensor")
    offset = rank - len(dims)
    if value_axis is not None and value_axis + offset != at:
        raise Couples(
            f"expected the batch dimension of 'ValueTensor' on axis {at} of the slice, "
            f"got axis {value_axis + offset}"
        )
    j = at - offset
    if value_axis is None and 0 <= j < len(dims) and dims[j] != 1:
        raise Couples(
            f"broadcasts its unbatched value (dims {list(dims)}) across the batch dimension"
        )


SET_VALUE = OpDef(
    op_type="set_value",
    doc="Out = Input with Input[starts:ends:steps] on `axes` set to ValueTensor (or the constant in "
    "values / fp32_values / int64_values...), broadcast to the slice; Python's clamping.",
    inputs=(
        In("Input"),
        In("ValueTensor", optional=True),
        In("StartsTensorList", None, variadic=True, optional=True),
        In("EndsTensorList", None, variadic=True, optional=True),
        In("StepsTensorList", None, variadic=True, optional=True),
    ),
    # NOTE: Paddle 2.x writes Out over Input; 3.x writes a new var. Never over a parameter.
    outputs=(Out("Out", inplace_of="Input"),),
    types={"T": ALL},
    attrs=SetValueAttrs,
    ignored_attrs=BACKEND_ATTRS,
    infer=_set_value_infer,
    batch=_set_value_batch,
    cases=(
        Case(
            {"Input": f32(3, 4, 5), "ValueTensor": f32(2, 5)},
            {"axes": [1], "starts": [1], "ends": [3], "steps": [1]},
            expect=_set_value_ref,
        ),
        Case(
            {"Input": f32(3, 4, 5)},
            {"axes": [1, 2], "starts": [-1, 0], "ends": [2**31 - 1] * 2, "steps": [1, 2]}
            | {"decrease_axes": [1], "shape": [1], "values": Attr(pb.SCALARS, [3.5])},
            expect=_set_value_ref,
        ),
        Case(
            {"Input": i64(4, 6)},
            {"axes": [0, 1], "starts": [3, -1], "ends": [-(2**31), 0], "steps": [-2, -2]}
            | {"shape": [3], "dtype": 3, "int64_values": [7, 8, 9]},
            expect=_set_value_ref,
        ),
        Case(
            {"Input": f32(4, 6)},
            {"axes": [1], "starts": [4], "ends": [2], "steps": [1]}
            | {"shape": [1], "fp32_values": [1.0]},
            expect=_set_value_ref,
        ),
        Case(
            {
                "Input": f32(5, 6),
                "ValueTensor": f32(1),
                "StartsTensorList": (np.array([1], np.int64),),
                "EndsTensorList": (np.array([-1], np.int32),),
            },
            {"axes": [0], "starts": [], "ends": [], "steps": [1]},
            expect=_set_value_ref,
        ),
        Case(
            {"Input": _bools(3, 4)},
            {"axes": [1], "starts": [0], "ends": [1], "decrease_axes": [1], "none_axes": [1]}
            | {"shape": [1], "dtype": 0, "bool_values": [1]},
            expect=_set_value_ref,
        ),
        Case(  # index grids this large are built at run time, not stored
            {"Input": _floats(2, 70, 70), "ValueTensor": _floats(70, 1)},
            {"axes": [1, 2], "starts": [0, -70], "ends": [70, 2**31 - 1], "steps": [1, 1]},
            expect=_set_value_ref,
        ),
        Case(
            {"Input": _floats(2, 5000)},
            {"axes": [1], "starts": [-1], "ends": [-5000], "steps": [-1], "shape": [1]}
            | {"fp32_values": [2.0]},
            expect=_set_value_ref,
        ),
        Case(
            {"Input": f32(3, 4), "ValueTensor": f32(3)},
            {"axes": [1], "starts": [0], "ends": [2]},
            raises="expected a value broadcastable to [3, 2], got [3]",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"Input": f32(3, 4)},
            {
                "axes": [1],
                "starts": [0],
                "ends": [2],
                "shape": [2],
                "values": Attr(pb.SCALARS, [1.0]),
            },
            raises="expected 2 values for shape [2], got 1",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {"Input": i32(3, 4)},
            {"axes": [1], "starts": [0], "ends": [2], "shape": [1], "dtype": 2}
            | {"values": Attr(pb.SCALARS, [2.0**40])},
            raises="expected values that fit int32",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {"Input": f32(3, 4)},
            {"axes": [1], "starts": [0], "ends": [2], "steps": [0], "shape": [1]}
            | {"fp32_values": [1.0]},
            raises="expected non-zero steps",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {"Input": f32(3, 4)},
            {"axes": [2], "starts": [0], "ends": [2], "shape": [1], "fp32_values": [1.0]},
            raises="axes must be in [0, 2), got 2",
            code=Code.AXIS_INVALID,
        ),
        Case(
            {"Input": f32(3, 4)},
            {"axes": [1], "starts": [0], "ends": [2], "decrease_axes": [1], "shape": [1]}
            | {"fp32_values": [1.0]},
            raises="decrease_axes 1: expected a size of 1, got 2",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"Input": f32(3, 4)},
            {"axes": [1], "starts": [0], "ends": [2], "shape": [1], "fp32_values": [1.0]}
            | {"values": Attr(pb.SCALARS, [1.0])},
            raises="expected the value in one of",
            code=Code.ATTR_VALUE,
        ),
    ),
)

# --- expand_v2, tile ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ExpandAttrs:
    shape: tuple[int, ...] = ()


def _expand_dim(i: int, size: int | None, dim: int | None) -> int:
    """Output dim i for the requested `size` (None: unknown) and X's `dim` (None: a new dim)."""
    if size is not None and size < -1:
        raise AttrError(f"expected shape values >= -1, got {size} at {i}")
    if dim is None:
        if size == -1:
            raise ShapeError(f"shape[{i}] = -1 keeps a dim that X does not have")
        return UNKNOWN if size is None else size
    if size is None:
        return dim if dim >= 0 and dim != 1 else UNKNOWN  # only a 1 can grow
    if size == -1:
        return dim
    if dim not in (1, UNKNOWN, size):
        raise ShapeError(f"shape[{i}]: cannot expand a dim of {dim} to {size}")
    return size


def _expand_v2_infer(
    x: TensorType,
    shape: TensorType | None,
    shape_list: tuple[TensorType, ...] | None,
    a: ExpandAttrs,
) -> Shape | TensorType:
    spec = int_operand(a.shape, ("Shape", shape), ("expand_shapes_tensor", shape_list))
    lead = len(spec) - x.rank
    if lead < 0:
        raise ShapeError(
            f"expected at least {x.rank} shape values for X {list(x.shape)}, got {spec}"
        )
    check_rank(len(spec))
    out = tuple(
        _expand_dim(i, s, x.shape[i - lead] if i >= lead else None) for i, s in enumerate(spec)
    )
    return carry(x, out, lambda v: np.broadcast_to(v, out))


def _expand_ref(x: np.ndarray, shape: Any, shape_list: Any, a: ExpandAttrs) -> np.ndarray:
    spec = (
        shape.tolist()
        if shape is not None
        else [t.item() for t in shape_list]
        if shape_list
        else list(a.shape)
    )
    lead = len(spec) - x.ndim
    return np.broadcast_to(x, [x.shape[i - lead] if s == -1 else s for i, s in enumerate(spec)])


def _expand_batch(view: BatchView) -> int:
    axis = only(view, "X")
    shape: tuple[int | float | bool, ...] | None = view.attrs.shape
    if view.types_in.get("expand_shapes_tensor"):
        raise Couples("takes its target shape from tensors: the batch dim may be expanded")
    if view.types_in.get("Shape"):
        shape = view.type("Shape").value
    if shape is None:
        raise Couples("takes its target shape from a tensor unknown before run time")
    at = axis + len(shape) - view.type("X").rank
    if shape[at] != -1:
        raise Couples(f"expands the batch dimension to {shape[at]}")
    return at


EXPAND_V2 = OpDef(
    op_type="expand_v2",
    doc="Broadcasts X to `shape` (or the Shape / expand_shapes_tensor tensors); -1 keeps a dim.",
    inputs=(
        In("X"),
        In("Shape", None, optional=True),
        In("expand_shapes_tensor", None, variadic=True, optional=True),
    ),
    outputs=(Out("Out"),),
    types={"T": ALL},
    attrs=ExpandAttrs,
    ignored_attrs=BACKEND_ATTRS,
    infer=_expand_v2_infer,
    batch=_expand_batch,
    cases=(
        Case({"X": f32(2, 1, 4)}, {"shape": [-1, 3, 4]}, expect=_expand_ref),
        Case({"X": f32(1, 4)}, {"shape": [2, 3, 4]}, expect=_expand_ref),
        Case({"X": f32()}, {"shape": [3]}, expect=_expand_ref),
        Case({"X": f32(1, 4)}, {"shape": [0, 4]}, expect=_expand_ref),
        Case({"X": i64(1, 4), "Shape": np.array([3, 4], np.int32)}, expect=_expand_ref),
        Case({"X": _bools(3, 1)}, {"shape": [2, -1, 4]}, expect=_expand_ref),
        Case(
            {
                "X": _floats(3, 1),
                "expand_shapes_tensor": (np.array([-1], np.int32), np.array(2, np.int64)),
            },
            expect=_expand_ref,
        ),
        Case(
            {"X": f32(2, 4)},
            {"shape": [3, 4]},
            raises="cannot expand a dim of 2 to 3",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"X": f32(1, 4)},
            {"shape": [-1, 3, 4]},
            raises="keeps a dim that X does not have",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"X": f32(1, 4)},
            {"shape": [-2, 4]},
            raises="expected shape values >= -1",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {"X": f32(1, 4, 5)},
            {"shape": [4, 5]},
            raises="expected at least 3 shape values",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"X": f32(1)}, {"shape": [1] * 10}, raises="rank <= 9, got 10", code=Code.SHAPE_MISMATCH
        ),
    ),
)


@dataclass(frozen=True, slots=True)
class TileAttrs:
    repeat_times: tuple[int, ...] = ()


def _tile_infer(
    x: TensorType,
    repeat_times: TensorType | None,
    repeat_list: tuple[TensorType, ...] | None,
    a: TileAttrs,
) -> Shape | TensorType:
    reps = int_operand(
        a.repeat_times, ("RepeatTimes", repeat_times), ("repeat_times_tensor", repeat_list)
    )
    if any(r is not None and r < 1 for r in reps):
        raise AttrError(f"expected repeat_times >= 1, got {reps}")
    rank = max(x.rank, len(reps))
    check_rank(rank)
    padded: Operand = [1] * (rank - len(reps))
    padded += reps
    dims = (1,) * (rank - x.rank) + x.shape
    out = tuple(UNKNOWN if r is None or d < 0 else d * r for d, r in zip(dims, padded, strict=True))
    counts = [1 if r is None else r for r in padded]  # used only when all are known
    return carry(x, out, lambda v: np.tile(v, counts))


def _tile_ref(x: np.ndarray, rt: Any, rl: Any, a: TileAttrs) -> np.ndarray:
    reps = rt.tolist() if rt is not None else [t.item() for t in rl] if rl else list(a.repeat_times)
    return np.tile(x, reps)


def _tile_batch(view: BatchView) -> int:
    axis = only(view, "X")
    reps: tuple[int | float | bool, ...] | None = view.attrs.repeat_times
    if view.types_in.get("repeat_times_tensor"):
        raise Couples("takes its repeat counts from tensors: the batch dim may be repeated")
    if view.types_in.get("RepeatTimes"):
        reps = view.type("RepeatTimes").value
    if reps is None:
        raise Couples("takes its repeat counts from a tensor unknown before run time")
    rank = view.type("X").rank
    padded = (1,) * (rank - len(reps)) + tuple(reps)
    at = axis + len(padded) - rank
    if padded[at] != 1:
        raise Couples(f"repeats the batch dimension {padded[at]} times")
    return at


TILE = OpDef(
    op_type="tile",
    doc="Repeats X `repeat_times` times along each dim (or RepeatTimes / repeat_times_tensor).",
    inputs=(
        In("X"),
        In("RepeatTimes", None, optional=True),
        In("repeat_times_tensor", None, variadic=True, optional=True),
    ),
    outputs=(Out("Out"),),
    types={"T": ALL},
    attrs=TileAttrs,
    ignored_attrs=BACKEND_ATTRS,
    infer=_tile_infer,
    batch=_tile_batch,
    cases=(
        Case({"X": f32(2, 1, 4)}, {"repeat_times": [1, 2, 3]}, expect=_tile_ref),
        Case({"X": f32(2, 3, 4)}, {"repeat_times": [2]}, expect=_tile_ref),
        Case({"X": f32(3)}, {"repeat_times": [2, 2]}, expect=_tile_ref),
        Case({"X": i64()}, {"repeat_times": []}, expect=_tile_ref),
        Case({"X": f32(3), "repeat_times_tensor": (np.array([2], np.int32),)}, expect=_tile_ref),
        Case({"X": _floats()}, {"repeat_times": [2, 3]}, expect=_tile_ref),
        Case({"X": _bools(2, 3), "RepeatTimes": np.array([3, 1, 2], np.int64)}, expect=_tile_ref),
        Case(
            {"X": f32(3)},
            {"repeat_times": [0]},
            raises="expected repeat_times >= 1, got [0]",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {"X": f32(3)},
            {"repeat_times": [1] * 10},
            raises="rank <= 9, got 10",
            code=Code.SHAPE_MISMATCH,
        ),
    ),
)

OPS = (SLICE, STRIDED_SLICE, SET_VALUE, EXPAND_V2, TILE)
