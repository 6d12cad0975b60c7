"""Batch rules: how each op treats the batch dimension, declared in its OpDef next to its shape rule.

To declare a new op, give its OpDef `batch=` one of the reusable rules below, or a small function
`(view: BatchView) -> int | Mapping[str, int | None]` beside its infer function. A rule is called
only when some input carries the batch (validator/batch.py tracks, var by var, at which axis); it
returns the batch axis of the outputs, or raises Couples("reduces over the batch dimension") when
running rows together would differ from running them one by one. ROWWISE: elementwise,
activation and unary ops (numpy right alignment: every batched input's batch axis lands on one
output axis; unbatched inputs broadcast, so they must have size 1 there). `batch_at(slot, axis)`:
only `slot` may carry the batch, at exactly `axis` (conv, pool, norm, resize: NCHW batch at 0).
RESHAPED: pure reshapes (reshape2, flatten, squeeze, unsqueeze), which keep rows apart only when
the batch dim stays whole with the same per-row layout. `reduced(view, axes, keep)` and `along(view,
axis, what)`: ops with axis attributes. SIZED_BY_VALUES: creation ops, whose inputs only give
sizes and values (a batched size couples). CONTROL: sub-blocks decide once for every row. Undeclared
(None) couples. tests/ops/test_batch_rules.py runs every op case batched and row by row through
the executor and checks each declaration against the outcome.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from graph_proto.types import Shape
from validator.ops._def import BatchRule, BatchView, Couples, TensorType
from validator.ops._shape import product

REDUCES: Final = "reduces over the batch dimension"


def only(view: BatchView, slot: str) -> int:
    """The batch axis of `slot`, which must be the only batched input."""
    others = [s for s in view.batched() if s != slot]
    if others:
        raise Couples(f"mixes rows: its {others[0]!r} input carries the batch dimension")
    axis = view.axis(slot)
    assert axis is not None  # a rule is only called when some input is batched
    return axis


def aligned(view: BatchView, offsets: Mapping[str, Sequence[int]]) -> int:
    """The output axis of the batch when input axis p of each argument lands on p + offset."""
    targets = {
        axis + offsets[slot][i]
        for slot, axes in view.axes.items()
        for i, axis in enumerate(axes)
        if axis is not None
    }
    if len(targets) != 1:
        raise Couples("lines the batch dimensions of its inputs up on different axes")
    target = targets.pop()
    for slot, axes in view.axes.items():
        for i, axis in enumerate(axes):
            t = view.types_in[slot][i]
            at = target - offsets[slot][i]
            if axis is None and 0 <= at < t.rank and t.shape[at] != 1:
                raise Couples(
                    f"broadcasts its unbatched {slot!r} (dims {list(t.shape)}) across the batch dimension"
                )
    return target


def _out_rank(view: BatchView) -> int:
    return max((t.rank for ts in view.types_out.values() for t in ts), default=0)


def ROWWISE(view: BatchView) -> int:
    """Elementwise with numpy broadcasting: every output carries the batch on one axis."""
    rank = _out_rank(view)
    offsets = {slot: [rank - t.rank for t in ts] for slot, ts in view.types_in.items()}
    return aligned(view, offsets)


def batch_at(slot: str, axis: int = 0) -> BatchRule:
    """Only `slot` may carry the batch, at `axis`; every output carries it at `axis` too."""

    def rule(view: BatchView) -> int:
        got = only(view, slot)
        if got != axis:
            raise Couples(
                f"expected the batch dimension at axis {axis} of {slot!r}, got axis {got}"
            )
        return axis

    return rule


def reshape_axis(x: Shape, axis: int, out: Shape) -> int:
    """Where a reshape puts the batch dim: it must stay whole, with the same dims before and after."""
    if any(d < 0 for i, d in enumerate(x) if i != axis):
        raise Couples(
            f"reshapes dims {list(x)} with unknown non-batch dims: rows may fold together"
        )
    unknown = [j for j, d in enumerate(out) if d < 0]
    if len(unknown) == 1:
        j = unknown[0]
        if product(x[:axis]) == product(out[:j]) and product(x[axis + 1 :]) == product(
            out[j + 1 :]
        ):
            return j
    raise Couples(
        f"folds the batch dimension into another (dims {list(x)} -> {list(out)}, batch at {axis})"
    )


def _single_out(view: BatchView) -> TensorType:
    return next(ts[0] for ts in view.types_out.values() if ts)


def RESHAPED(view: BatchView) -> int:
    """A pure reshape of X (its shape attrs or tensors decide `Out`'s dims)."""
    return reshape_axis(view.type("X").shape, only(view, "X"), _single_out(view).shape)


def reduced(axis: int, axes: Sequence[int], keep: bool, what: str = REDUCES) -> int:
    """The batch axis after removing `axes` (normalized) unless `keep`; couples if it is one."""
    if axis in axes:
        raise Couples(what)
    return axis if keep else axis - sum(1 for a in axes if a < axis)


def along(axis: int, op_axis: int, rank: int, what: str) -> int:
    """An op that works along `op_axis` (may be negative) and keeps the batch axis in place."""
    if (op_axis + rank if op_axis < 0 else op_axis) == axis:
        raise Couples(what)
    return axis


def SIZED_BY_VALUES(view: BatchView) -> int:
    """Creation ops: their inputs are sizes, bounds or fill values; batched ones couple."""
    raise Couples(
        f"builds its output from batch-dependent values ({view.batched()[0]!r}): "
        "its size or contents depend on the batch"
    )


def CONTROL(view: BatchView) -> int:
    """conditional_block and while: one predicate or trip count decides for every row."""
    raise Couples(
        f"passes batched {view.batched()[0]!r} into control flow: one branch or trip count "
        "decides for every row"
    )
