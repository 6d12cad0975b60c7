"""ONNX lowering of validator/ops/manipulation.py: reshape, transpose, flatten, squeeze,
unsqueeze, concat, split and stack.

Target shapes are constants when inference knows every output dim; otherwise they are computed
at run time from Shape(X) and the shape tensors, so unknown (-1) dims work.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np

from executor.lower._builder import OnnxBuilder, Value
from executor.lower._int_lists import (
    concat_ints,
    dims,
    int_values,
    int_vector,
    may_be_empty,
)
from graph_proto.types import UNKNOWN, DType
from validator.ops import int_scalar, norm_axes, norm_axis
from validator.ops.manipulation import (
    AxisAttrs,
    FlattenAttrs,
    ReshapeAttrs,
    RollAttrs,
    SplitAttrs,
    SqueezeAttrs,
    TransposeAttrs,
    UnsqueezeAttrs,
)


def _reshape(b: OnnxBuilder, x: Value, target: str) -> str:
    # allowzero=1: a 0 in a computed target is a size of 0; Paddle's copying is resolved before.
    return b.op("Reshape", x.name, target, allowzero=1)


def _reshape2_emit(
    b: OnnxBuilder,
    x: Value,
    shape: Value | None,
    shape_list: tuple[Value, ...] | None,
    a: ReshapeAttrs,
) -> str:
    sources = (("ShapeTensor", shape_list), ("Shape", shape))
    values = int_values(a.shape, *sources)
    copying = 0 not in x.shape and any(v in (0, None) for v in values)
    # NOTE: Paddle's 0 copies X's dim at the same index, but is a size of 0 when X is empty
    # (ONNX's allowzero=0 always copies). Only an X that may be empty needs the run-time
    # arithmetic below; a lean lowering takes X as non-empty instead (b.assume_nonempty), so
    # that the target is a constant ONNX's shape inference follows (the dims it copies keep
    # their symbols: onnxruntime's fusions, SkipLayerNormalization, want them).
    emptiness_copied = copying and may_be_empty(x)
    assumed = emptiness_copied and b.assume_nonempty(x)
    empty_matters = emptiness_copied and not assumed
    out = b.out()
    if out.known and not empty_matters:  # else the rule assumed X non-empty
        return _reshape(b, x, b.ints(out.shape))
    own = _own_dims(b, x, shape_list, values, assumed)
    if own is not None:
        # ONNX's 0 copies X's dim at the same index, which is what these elements hold.
        return b.op("Reshape", x.name, b.ints(own), allowzero=0)
    known = [v for v in values if v is not None]
    if copying and len(known) == len(values) and _copy_end(known) <= x.rank:
        exact = -1 not in known and not _emptiness_reaches_a_copy(x, known[: _copy_end(known)])
        if assumed or exact:
            # ONNX's own copy (allowzero=0) is Paddle's: an empty X has its 0 in a copied dim
            # (or cannot be empty, or is taken as non-empty), and no -1 is left to infer from
            # an empty X.
            return b.op("Reshape", x.name, b.ints(known), allowzero=0)
        return _reshape(b, x, _copied_target(b, x, known))
    spec, _ = int_vector(b, a.shape, *sources)
    if not copying:
        return _reshape(b, x, spec)  # no 0 to copy (an empty X takes a 0 as a size)
    if not empty_matters:
        # X holds elements (by its dims, or taken so): a 0, known now or only at run time,
        # copies X's dim at its index in both, and -1 is inferred alike.
        return b.op("Reshape", x.name, spec, allowzero=0)
    # -1 is left for ONNX to infer.
    n = len(values)
    copies = concat_ints(b, [dims(b, x, 0, min(n, x.rank)), [0] * max(0, n - x.rank)])
    # an empty X copies 0s: Min(dims, Size(X)), as in _copied_target
    copies = b.op("Min", copies, b.op("Size", x.name))
    zero = b.op("Equal", spec, b.ints([0] * n))
    return _reshape(b, x, b.op("Where", zero, copies, spec))


def _own_dims(
    b: OnnxBuilder,
    x: Value,
    shape_list: tuple[Value, ...] | None,
    values: Sequence[int | None],
    nonempty: bool,
) -> list[int] | None:
    """A constant target for a ShapeTensor list whose unknown elements are X's own dims at their
    index (`reshape(x, [paddle.shape(x)[0], 2, c, h, w])`, or a dim X has by construction from
    the tensor the element measured: a channel shuffle, a head split),
    with those elements as 0; None when another element is unknown, or, unless X is taken as
    `nonempty`, a 0 (Paddle's 0 is a size of 0 for an empty X) or a -1 (inferred from an
    empty X) makes it differ from Paddle.

    Without it the target is computed at run time: the list's Concat, then Paddle's 0-copy
    (Equal, Where, Min, Size), 5-10 small nodes per reshape that onnxruntime cannot fold."""
    if not shape_list or None not in values:
        return None
    if not nonempty and (0 in values or (-1 in values and may_be_empty(x))):
        return None
    if any(v == 0 and i >= x.rank for i, v in enumerate(values)):
        return None  # a 0 past X's rank copies nothing (the validator's to refuse)
    target = []
    for i, (value, element) in enumerate(zip(values, shape_list, strict=True)):
        if value is None:
            dim = b.dim_of(element.name)
            if i >= x.rank or dim is None or b.same_dim(*dim) != b.same_dim(x.name, i):
                return None
            value = 0
        target.append(value)
    return target


def _copied_target(b: OnnxBuilder, x: Value, values: list[int]) -> str:
    """The target of a constant shape whose 0s copy X's dims: Paddle's 0 is X's dim at the same
    index, but a size of 0 when X is empty. Min(dims, Size(X)) is both: a non-empty X's size is at
    least each of its dims. Only the prefix up to the last 0 is computed at run time."""
    end = _copy_end(values)
    copies = dims(b, x, 0, end)
    if _emptiness_reaches_a_copy(x, values[:end]):
        size = b.op("Size", x.name)
        copies = b.op("Min", copies if isinstance(copies, str) else b.ints(copies), size)
    if all(v == 0 for v in values[:end]):
        return concat_ints(b, [copies, values[end:]])
    copied = b.const(np.array([v == 0 for v in values[:end]]), hint="copied")
    copies = copies if isinstance(copies, str) else b.ints(copies)
    prefix = b.op("Where", copied, copies, b.ints(values[:end]))
    return concat_ints(b, [prefix, values[end:]])


def _copy_end(values: list[int]) -> int:
    """One past the last 0 (a copied dim) of a shape."""
    return max(i for i, v in enumerate(values) if v == 0) + 1


def _emptiness_reaches_a_copy(x: Value, prefix: list[int]) -> bool:
    """Whether a copied dim can be non-zero while X is empty: another of X's dims may be 0."""
    maybe_zero = [i for i, d in enumerate(x.shape) if d <= 0]
    copied = [i for i, v in enumerate(prefix) if v == 0]
    return any(j != i for i in copied for j in maybe_zero)


def _transpose2_emit(b: OnnxBuilder, x: Value, a: TransposeAttrs) -> str:
    perm = list(norm_axes(a.axis, x.rank)) if x.rank else []
    if perm == list(range(x.rank)):
        return b.op("Identity", x.name)
    return b.op("Transpose", x.name, perm=perm)


def _flatten_contiguous_range_emit(b: OnnxBuilder, x: Value, a: FlattenAttrs) -> str:
    out = b.out()
    if out.known:  # a 0-D X becomes [1]
        return _reshape(b, x, b.ints(out.shape))
    start = norm_axis(a.start_axis, x.rank)
    stop = norm_axis(a.stop_axis, x.rank) + 1
    outer = [*x.shape[:start], *x.shape[stop:]]
    if all(d > 0 for d in outer):
        # The unknown dims are all in the merged range and no other dim is 0: ONNX infers the
        # -1 (an empty X's too: 0 / the others), a constant target.
        return _reshape(b, x, b.ints([*x.shape[:start], -1, *x.shape[stop:]]))
    merged = dims(b, x, start, stop)
    if isinstance(merged, str):
        # The product, not -1: ONNX cannot infer a -1 beside another 0 dim of an empty X.
        merged = b.op("ReduceProd", merged, keepdims=1)
    else:
        merged = [int(np.prod(merged, dtype=np.int64))]
    target = concat_ints(b, [dims(b, x, 0, start), merged, dims(b, x, stop, x.rank)])
    return _reshape(b, x, target)


def _squeeze2_emit(b: OnnxBuilder, x: Value, a: SqueezeAttrs) -> str:
    if not a.axes:
        drop = [i for i, d in enumerate(x.shape) if d == 1]  # an unknown dim stays, as the rule
    elif x.rank == 0:
        drop = []
    else:
        # NOTE: as the rule: a listed unknown dim is dropped, a listed dim of another size stays.
        # ONNX Squeeze fails at run time if that unknown dim is not 1, where Paddle would keep it
        # (another rank than the one inferred): an error, never a wrong result.
        listed = {norm_axis(axis, x.rank) for axis in a.axes}
        drop = sorted(i for i in listed if x.shape[i] in (1, UNKNOWN))
    if not drop:
        return b.op("Identity", x.name)
    return b.op("Squeeze", x.name, b.ints(drop))


def _unsqueeze_positions(axes: list[int], rank: int) -> list[int]:
    """Where the new 1s end up: Paddle inserts them one after the other, each axis counting in
    the rank reached so far; ONNX Unsqueeze takes the final positions."""
    positions: list[int] = []
    for k, axis in enumerate(axes):
        at = axis + rank + k + 1 if axis < 0 else axis
        positions = [p + 1 if p >= at else p for p in positions] + [at]
    return positions


def _unsqueeze2_emit(
    b: OnnxBuilder,
    x: Value,
    axes_tensor: Value | None,
    axes_list: tuple[Value, ...] | None,
    a: UnsqueezeAttrs,
) -> str:
    sources = (("AxesTensor", axes_tensor), ("AxesTensorList", axes_list))
    axes = int_values(a.axes, *sources)
    if None not in axes:
        positions = _unsqueeze_positions([v for v in axes if v is not None], x.rank)
        if not positions:
            return b.op("Identity", x.name)
        return b.op("Unsqueeze", x.name, b.ints(positions))
    name, _ = int_vector(b, a.axes, *sources)
    return b.op("Unsqueeze", x.name, _run_time_positions(b, name, len(axes), x.rank))


def _run_time_positions(b: OnnxBuilder, axes: str, n: int, rank: int) -> str:
    """_unsqueeze_positions on an int64 vector of n axes known only at run time."""
    positions = ""
    for k in range(n):
        axis = b.op("Slice", axes, b.ints([k]), b.ints([k + 1]))
        negative = b.op("Less", axis, b.ints([0]))
        at = b.op("Where", negative, b.op("Add", axis, b.ints([rank + k + 1])), axis)
        if positions:
            later = b.cast(b.op("GreaterOrEqual", positions, at), DType.INT64)
            positions = b.op("Concat", b.op("Add", positions, later), at, axis=0)
        else:
            positions = at
    return positions


def _axis(attr: int, axis_tensor: Value | None, rank: int) -> int:
    """The axis, from AxisTensor when given: its value must be known, ONNX takes an attribute."""
    value = attr if axis_tensor is None else int_scalar(axis_tensor.type, "AxisTensor")
    assert value is not None, (
        "the rule (constant_axis) refuses an AxisTensor known only at run time"
    )
    return norm_axis(value, rank)


def _concat_emit(
    b: OnnxBuilder, xs: tuple[Value, ...], axis_tensor: Value | None, a: AxisAttrs
) -> str:
    axis = _axis(a.axis, axis_tensor, xs[0].rank)
    if len(xs) == 1:
        return b.op("Identity", xs[0].name)
    return b.op("Concat", *(x.name for x in xs), axis=axis)


def _split_emit(
    b: OnnxBuilder,
    x: Value,
    axis_tensor: Value | None,
    sections_list: tuple[Value, ...] | None,
    a: SplitAttrs,
) -> list[tuple[str, ...]]:
    axis = _axis(a.axis, axis_tensor, x.rank)
    if a.num:
        return [b.op_n("Split", x.name, axis=axis, n_outputs=a.num)]
    sources = (("SectionsTensorList", sections_list),)
    sections = int_values(a.sections, *sources)
    outs = b.outputs[0]
    assert isinstance(outs, tuple)
    sizes = [t.shape[axis] for t in outs]
    if UNKNOWN not in sizes and len(sizes) == len(sections):
        return [b.op_n("Split", x.name, b.ints(sizes), axis=axis, n_outputs=len(sizes))]
    spec, _ = int_vector(b, a.sections, *sources)
    if -1 in sections or None in sections:
        # NOTE: a -1 section takes what the others leave: dim - (sum of all + 1).
        dim = dims(b, x, axis, axis + 1)
        total = b.op("ReduceSum", spec, b.ints([0]), keepdims=1)
        left = b.op("Sub", concat_ints(b, [dim]), b.op("Add", total, b.ints([1])))
        split = b.op("Where", b.op("Equal", spec, b.ints([-1] * len(sections))), left, spec)
    else:
        split = spec
    return [b.op_n("Split", x.name, split, axis=axis, n_outputs=len(sections))]


def _stack_emit(b: OnnxBuilder, xs: tuple[Value, ...], a: AxisAttrs) -> str:
    axis = norm_axis(a.axis, xs[0].rank + 1)
    grown = [b.op("Unsqueeze", x.name, b.ints([axis])) for x in xs]
    return grown[0] if len(grown) == 1 else b.op("Concat", *grown, axis=axis)


def _roll_axis(b: OnnxBuilder, x: str, axis: int, shift: str) -> str:
    """x rotated by `shift` (1-element int64) along `axis`: its last s elements first, s being
    the shift modulo the size (Max(size, 1) so that an empty axis never divides by 0)."""
    size = b.op("Gather", b.op("Shape", x), b.ints([axis]))
    s = b.op("Mod", shift, b.op("Max", size, b.ints([1])))  # fmod=0: the sign of the size
    cut = b.op("Sub", size, s)
    head = b.op("Slice", x, cut, size, b.ints([axis]))
    tail = b.op("Slice", x, b.ints([0]), cut, b.ints([axis]))
    return b.op("Concat", head, tail, axis=axis)


def _roll_emit(b: OnnxBuilder, x: Value, shifts_tensor: Value | None, a: RollAttrs) -> str:
    count = len(a.axis) if a.axis else 1
    if shifts_tensor is None:
        shifts = [b.ints([s]) for s in a.shifts]
    else:
        shifts = [
            b.op("Slice", shifts_tensor.name, b.ints([i]), b.ints([i + 1])) for i in range(count)
        ]
    if not a.axis:
        flat = _roll_axis(b, b.op("Reshape", x.name, b.ints([-1])), 0, shifts[0])
        return b.op("Reshape", flat, b.op("Shape", x.name))
    out = x.name
    for axis, shift in zip(a.axis, shifts, strict=True):
        out = _roll_axis(b, out, norm_axis(axis, x.rank), shift)
    return out if out != x.name else b.op("Identity", x.name)


def _meshgrid_emit(b: OnnxBuilder, xs: tuple[Value, ...], _a: object) -> list[tuple[str, ...]]:
    n = len(xs)
    flats = [b.op("Reshape", x.name, b.ints([-1])) for x in xs]
    grid = b.op("Concat", *(b.op("Shape", f) for f in flats), axis=0)
    outs = []
    for i, flat in enumerate(flats):
        along = b.op("Reshape", flat, b.ints([1] * i + [-1] + [1] * (n - 1 - i)))
        outs.append(b.op("Expand", along, grid))
    return [tuple(outs)]


EMITTERS: Final = {
    "roll": _roll_emit,
    "meshgrid": _meshgrid_emit,
    "reshape2": _reshape2_emit,
    "transpose2": _transpose2_emit,
    "flatten_contiguous_range": _flatten_contiguous_range_emit,
    "squeeze2": _squeeze2_emit,
    "unsqueeze2": _unsqueeze2_emit,
    "concat": _concat_emit,
    "split": _split_emit,
    "stack": _stack_emit,
}
