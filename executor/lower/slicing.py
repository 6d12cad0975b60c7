"""ONNX lowering of validator/ops/slicing.py: slice, strided_slice, set_value, expand_v2, tile.

Paddle slices with Python's clamping. ONNX Slice agrees for positive steps; for negative steps
onnxruntime differs in two places, fixed here before the Slice (see _python_bounds).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np

from executor.lower._builder import OnnxBuilder, Value
from executor.lower._int_lists import Given, Piece, concat_ints, dims, int_values, int_vector
from validator.ops import Operand
from validator.ops.slicing import (
    ExpandAttrs,
    SetValueAttrs,
    SliceAttrs,
    StridedSliceAttrs,
    TileAttrs,
    set_value_assign_axes,
    set_value_constant,
    set_value_steps,
)

INT32_MAX: Final = 2**31 - 1
INT64_MAX: Final = 2**63 - 1
# onnxruntime reads exactly these ends as "to the edge" (for a negative step: past index 0);
# Python clamps them to the last index (an empty slice for a negative step).
_END_SENTINELS: Final = (INT32_MAX, INT64_MAX)


def _decrease(b: OnnxBuilder, y: str, decrease_axis: Sequence[int]) -> str:
    """Drops the size-1 dims of decrease_axis (all of them: a 0-D result)."""
    if not decrease_axis:
        return y
    return b.op("Squeeze", y, b.ints(sorted(decrease_axis)))


def _slice_emit(
    b: OnnxBuilder,
    x: Value,
    starts_tensor: Value | None,
    ends_tensor: Value | None,
    starts_list: tuple[Value, ...] | None,
    ends_list: tuple[Value, ...] | None,
    a: SliceAttrs,
) -> str:
    if not a.axes:
        return b.op("Identity", x.name)
    starts, _ = int_vector(
        b, a.starts, ("StartsTensor", starts_tensor), ("StartsTensorList", starts_list)
    )
    ends, _ = int_vector(b, a.ends, ("EndsTensor", ends_tensor), ("EndsTensorList", ends_list))
    # With a step of 1, ONNX clamps starts and ends exactly as Python (and Paddle) do.
    y = b.op("Slice", x.name, starts, ends, b.ints(a.axes))
    return _decrease(b, y, a.decrease_axis)


def _vector(
    b: OnnxBuilder, attr: Sequence[int], sources: Sequence[tuple[str, Given]], values: Operand
) -> str:
    """The int64 vector of a list operand, where `values` (known ints) override its elements."""
    if None not in values:
        return b.ints([v for v in values if v is not None])
    name, given = int_vector(b, attr, *sources)
    if given == values:
        return name
    pieces = [
        [v] if v is not None else b.op("Slice", name, b.ints([i]), b.ints([i + 1]))
        for i, v in enumerate(values)
    ]
    return concat_ints(b, pieces)


def _static_bounds(start: int, end: int, step: int, dim: int) -> tuple[int, int] | None:
    """ONNX bounds that slice as Python's start:end:step does, or None when that needs the dim."""
    if step > 0:
        return start, end
    if end in _END_SENTINELS:
        end = INT64_MAX - 1  # past the last index either way: nothing is taken
    if start >= 0:
        return start, end
    if dim < 0:
        return None
    # Python: a start before index 0 takes nothing; onnxruntime would clamp it to 0.
    return (0, 0) if start + dim < 0 else (start, end)


def _python_bounds(
    b: OnnxBuilder, x: Value, axes: Sequence[int], starts: str, ends: str, steps: str
) -> tuple[str, str]:
    """Run-time version of _static_bounds on the int64 vectors, for every axis at once."""
    dim = concat_ints(b, [dims(b, x, axis, axis + 1) for axis in axes])
    n = len(axes)
    backward = b.op("Less", steps, b.ints([0] * n))
    sentinel = b.op(
        "Or",
        b.op("Equal", ends, b.ints([INT32_MAX] * n)),
        b.op("Equal", ends, b.ints([INT64_MAX] * n)),
    )
    ends = b.op("Where", b.op("And", backward, sentinel), b.ints([INT64_MAX - 1] * n), ends)
    before = b.op("Less", starts, b.op("Neg", dim))
    nothing = b.op("And", backward, before)
    zeros = b.ints([0] * n)
    return b.op("Where", nothing, zeros, starts), b.op("Where", nothing, zeros, ends)


def _paddle_last(a: StridedSliceAttrs, starts: Operand, ends: Operand, steps: Operand) -> None:
    """NOTE: Paddle's kernel reads start -1, end 0 with infer_flags -1 on a decreased axis as
    x[-1] (the bounds Python writes for a tensor index); rewritten in place to -1:max:1."""
    flags = a.infer_flags or (1,) * len(a.axes)
    for i, axis in enumerate(a.axes):
        if (starts[i], ends[i], flags[i]) == (-1, 0, -1) and axis in a.decrease_axis:
            starts[i], ends[i], steps[i] = -1, INT64_MAX, 1


def _strided_slice_emit(
    b: OnnxBuilder,
    x: Value,
    starts_tensor: Value | None,
    starts_list: tuple[Value, ...] | None,
    ends_tensor: Value | None,
    ends_list: tuple[Value, ...] | None,
    strides_tensor: Value | None,
    strides_list: tuple[Value, ...] | None,
    a: StridedSliceAttrs,
) -> str:
    if not a.axes:
        return b.op("Identity", x.name)
    starts_from = (("StartsTensor", starts_tensor), ("StartsTensorList", starts_list))
    ends_from = (("EndsTensor", ends_tensor), ("EndsTensorList", ends_list))
    steps_from = (("StridesTensor", strides_tensor), ("StridesTensorList", strides_list))
    s = int_values(a.starts, *starts_from)
    e = int_values(a.ends, *ends_from)
    t = int_values(a.strides, *steps_from)
    _paddle_last(a, s, e, t)
    bounds = [
        None
        if v is None or w is None or step is None
        else _static_bounds(v, w, step, x.shape[axis])
        for axis, v, w, step in zip(a.axes, s, e, t, strict=True)
    ]
    if all(bound is not None for bound in bounds):
        starts = b.ints([bound[0] for bound in bounds if bound is not None])
        ends = b.ints([bound[1] for bound in bounds if bound is not None])
        steps = b.ints([step for step in t if step is not None])
    else:
        starts = _vector(b, a.starts, starts_from, s)
        ends = _vector(b, a.ends, ends_from, e)
        steps = _vector(b, a.strides, steps_from, t)
        if any(step is None or step < 0 for step in t):
            starts, ends = _python_bounds(b, x, a.axes, starts, ends, steps)
    y = b.op("Slice", x.name, starts, ends, b.ints(a.axes), steps)
    return _decrease(b, y, a.decrease_axis)


def _python_index_range(b: OnnxBuilder, dim: str, start: str, end: str, step: str) -> str:
    """Range(*slice(start, end, step).indices(dim)) on 0-D int64 values: Python's clamping."""
    forward = b.op("Greater", step, b.const(np.zeros((), np.int64)))
    zero, minus_one = b.const(np.zeros((), np.int64)), b.const(np.full((), -1, np.int64))
    lowest = b.op("Where", forward, zero, minus_one)
    highest = b.op("Add", dim, lowest)

    def clamp(v: str) -> str:
        negative = b.op("Less", v, zero)
        from_end = b.op("Max", b.op("Add", v, dim), lowest)
        return b.op("Where", negative, from_end, b.op("Min", v, highest))

    return b.op("Range", clamp(start), clamp(end), step)


def _element(b: OnnxBuilder, vector: str, i: int) -> str:
    return b.op("Squeeze", b.op("Slice", vector, b.ints([i]), b.ints([i + 1])), b.ints([0]))


def _slice_indices(
    b: OnnxBuilder, x: Value, a: SetValueAttrs, sources: Sequence[tuple[str, Given]]
) -> list[np.ndarray | str]:
    """Per axis of a.axes, the indices the slice writes: known now, or an int64 vector."""
    (starts, s), (ends, e), (steps, t) = (
        int_vector(b, attr, source)
        for attr, source in zip((a.starts, a.ends, set_value_steps(a)), sources, strict=True)
    )
    indices: list[np.ndarray | str] = []
    for i, axis in enumerate(a.axes):
        start, end, step, dim = s[i], e[i], t[i], x.shape[axis]
        if None not in (start, end, step) and dim >= 0:
            first, stop, stride = slice(start, end, step).indices(dim)
            known = np.arange(first, stop, stride, dtype=np.int64)
            small = known.size <= _CONSTANT_GRID
            bounds = [b.const(np.asarray(v, np.int64)) for v in (first, stop, stride)]
            indices.append(known if small else b.op("Range", *bounds))
            continue
        size = (
            b.const(np.asarray(dim, np.int64))
            if dim >= 0
            else b.op("Squeeze", b.op("Shape", x.name, start=axis, end=axis + 1), b.ints([0]))
        )
        picked = [
            b.const(np.asarray(v, np.int64)) if v is not None else _element(b, vec, i)
            for v, vec in ((start, starts), (end, ends), (step, steps))
        ]
        indices.append(_python_index_range(b, size, *picked))
    return indices


# Index grids up to this many cells are constants; larger ones are built at run time, so a
# small program cannot make a huge initializer.
_CONSTANT_GRID: Final = 4096


def _grid(b: OnnxBuilder, indices: Sequence[np.ndarray | str]) -> str:
    """ScatterND indices [n_1, ..., n_k, k]: every combination of the per-axis indices."""
    known = [i for i in indices if isinstance(i, np.ndarray)]
    if len(known) == len(indices) and np.prod([i.size for i in known]) <= _CONSTANT_GRID:
        mesh = np.meshgrid(*known, indexing="ij")
        return b.const(np.stack(mesh, axis=-1).astype(np.int64), hint="indices")
    k = len(indices)
    vectors = [b.ints(i.tolist()) if isinstance(i, np.ndarray) else i for i in indices]
    shape = concat_ints(b, [b.op("Shape", v) for v in vectors])
    columns = [
        b.op(
            "Unsqueeze",
            b.op("Expand", b.op("Reshape", v, b.ints([1] * j + [-1] + [1] * (k - j - 1))), shape),
            b.ints([k]),
        )
        for j, v in enumerate(vectors)
    ]
    return columns[0] if k == 1 else b.op("Concat", *columns, axis=-1)


def _set_value_emit(
    b: OnnxBuilder,
    x: Value,
    value: Value | None,
    starts_list: tuple[Value, ...] | None,
    ends_list: tuple[Value, ...] | None,
    steps_list: tuple[Value, ...] | None,
    a: SetValueAttrs,
) -> str:
    """ScatterND of the value, broadcast to the slice, at the slice's indices: the sliced axes
    go first (Transpose), so the indices name only them and the other dims ride along."""
    fill = value.name if value else b.const(set_value_constant(a, x.dtype), hint="value")
    sources = (
        ("StartsTensorList", starts_list),
        ("EndsTensorList", ends_list),
        ("StepsTensorList", steps_list),
    )
    indices = _slice_indices(b, x, a, sources)
    sizes: list[Piece] = [dims(b, x, axis, axis + 1) for axis in range(x.rank)]
    for axis, picked in zip(a.axes, indices, strict=True):
        sizes[axis] = [len(picked)] if isinstance(picked, np.ndarray) else b.op("Shape", picked)
    slice_shape = concat_ints(b, sizes)
    target = concat_ints(b, _assign_pieces(a, sizes))
    # Expand broadcasts both ways; validation checked that the value fits the slice.
    updates = b.op("Reshape", b.op("Expand", fill, target), slice_shape)
    if not a.axes:
        return updates
    if (around := _around_one_run(b, x, a.axes, indices, updates)) is not None:
        return around
    rest = [axis for axis in range(x.rank) if axis not in a.axes]
    perm = [*a.axes, *rest]
    identity = perm == list(range(x.rank))
    data = x.name if identity else b.op("Transpose", x.name, perm=perm)
    if not identity:
        updates = b.op("Transpose", updates, perm=perm)
    written = b.op("ScatterND", data, _grid(b, indices), updates)
    if identity:
        return written
    return b.op("Transpose", written, perm=[perm.index(axis) for axis in range(x.rank)])


def _around_one_run(
    b: OnnxBuilder,
    x: Value,
    axes: Sequence[int],
    indices: Sequence[np.ndarray | str],
    updates: str,
) -> str | None:
    """X with a run of consecutive indices along one axis replaced, as X's part before it, the
    updates and X's part after it, concatenated (`out[:, :c] = ...`: ReXNet's partial
    residual adds); None for any other slice. No Transposes of X around a ScatterND: each of
    those copies the whole activation (ReXNet: 33 Transposes)."""
    if len(axes) != 1 or not isinstance(indices[0], np.ndarray) or not indices[0].size:
        return None
    run, axis = indices[0], axes[0]
    first, last = int(run[0]), int(run[-1])
    if not np.array_equal(run, np.arange(first, last + 1)):
        return None
    parts = []
    if first > 0:
        parts.append(b.op("Slice", x.name, b.ints([0]), b.ints([first]), b.ints([axis])))
    parts.append(updates)
    if last + 1 < x.shape[axis]:  # (indices known now: so is the dim)
        end = b.ints([x.shape[axis]])
        parts.append(b.op("Slice", x.name, b.ints([last + 1]), end, b.ints([axis])))
    return parts[0] if len(parts) == 1 else b.op("Concat", *parts, axis=axis)


def _assign_pieces(a: SetValueAttrs, sizes: Sequence[Piece]) -> list[Piece]:
    """set_value_assign_shape on pieces: decrease_axes dropped, a 1 per none_axes."""
    return [[1] if axis is None else sizes[axis] for axis in set_value_assign_axes(a, len(sizes))]


def _expand_v2_emit(
    b: OnnxBuilder,
    x: Value,
    shape: Value | None,
    shape_list: tuple[Value, ...] | None,
    a: ExpandAttrs,
) -> str:
    out = b.out()
    if out.known:
        return b.op("Expand", x.name, b.ints(out.shape))
    spec, values = int_vector(b, a.shape, ("Shape", shape), ("expand_shapes_tensor", shape_list))
    if -1 in values or None in values:
        # Paddle's -1 keeps X's dim; ONNX Expand broadcasts both ways, so a 1 keeps it too.
        n = len(values)
        keep = b.op("Equal", spec, b.ints([-1] * n))
        spec = b.op("Where", keep, b.ints([1] * n), spec)
    return b.op("Expand", x.name, spec)


def _tile_emit(
    b: OnnxBuilder,
    x: Value,
    repeat_times: Value | None,
    repeat_list: tuple[Value, ...] | None,
    a: TileAttrs,
) -> str:
    sources = (("RepeatTimes", repeat_times), ("repeat_times_tensor", repeat_list))
    values = int_values(a.repeat_times, *sources)
    rank = max(x.rank, len(values))
    if rank == 0:
        return b.op("Identity", x.name)
    # Paddle aligns X and repeat_times on the right: X gets leading 1s, the list leading 1s.
    grown = x.name
    if rank > x.rank:
        grown = b.op("Unsqueeze", x.name, b.ints(range(rank - x.rank)))
    reps: Piece = [v for v in values if v is not None]
    if None in values:
        reps = int_vector(b, a.repeat_times, *sources)[0]
    return b.op("Tile", grown, concat_ints(b, [[1] * (rank - len(values)), reps]))


EMITTERS: Final = {
    "slice": _slice_emit,
    "strided_slice": _strided_slice_emit,
    "set_value": _set_value_emit,
    "expand_v2": _expand_v2_emit,
    "tile": _tile_emit,
}
