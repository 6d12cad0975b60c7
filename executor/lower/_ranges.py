"""What integer values a value of the graph being built can hold, read off the nodes that made it:
for index guards (OnnxBuilder.guard_range) that need no run-time reduction.

Position ids (`cumsum(ones_like(ids), axis=1) - ones_like(ids)`) lie in [0, S - 1], S a dim of
the feed `ids`; token type ids made by `zeros_like(ids)` are all 0. Such indices need no range
guard in the graph (nine nodes a guard: two reductions, a reshape and shape arithmetic): a
range inside the table always passes, and one whose top follows a feed dim is checked on that
dim before the run (RuntimeChecks.shape_checks), once per request shape.

A range is only ever a superset of the values (sound): [low, high] with every value inside.
`exact` says more: the tensor, when it has any values, holds `low` and `high` themselves, so a
check of `high` refuses exactly the requests a guard of the values would refuse.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from executor.runtime_checks import Bound

# Nodes that keep their input's values (and so its range) as they are, only the shape moves.
_SAME_VALUES: Final = frozenset({"Identity", "Reshape", "Squeeze", "Unsqueeze", "Flatten"})
# The integer types a Cast may take a range (or a dim) to: Paddle's int32 and ONNX's int64.
INTEGER_TYPES: Final = frozenset({TensorProto.INT32, TensorProto.INT64})
# How far back through producers a range is looked for: indices made by a few ops from a shape.
_MAX_DEPTH: Final = 12


@dataclass(frozen=True, slots=True)
class ValueRange:
    """Every value lies in [low, high]; `exact`: both are held, when there are values.
    `empty_with`: the feed that is empty exactly when this value is (NEVER_EMPTY: a constant
    with values), or None when not known."""

    low: Bound
    high: Bound
    exact: bool
    empty_with: str | None = None

    @property
    def uniform(self) -> bool:
        """One value everywhere, a number."""
        return self.exact and self.low.dim is None and self.low == self.high


NEVER_EMPTY: Final = ""
Producers = Mapping[str, onnx.NodeProto]
# Nodes whose output has their first input's shape.
_SAME_SHAPE: Final = frozenset({"Identity", "Cast", "Not", "Neg", "Abs"})
# Elementwise nodes that broadcast their inputs (numpy's rules).
_BROADCAST: Final = frozenset(
    {"Add", "Sub", "Mul", "Div", "Where", "Equal", "Less", "Greater", "And", "Or"}
)


@dataclass(frozen=True, slots=True)
class GraphFacts:
    """What the builder knows of the graph so far: who made each value, the small constants
    it made, the program's parameters, the ranks of the feeds, and `dim_of` (OnnxBuilder.dim_of:
    the dim a one-integer value is read from)."""

    producers: Producers
    constants: Mapping[str, np.ndarray]
    params: Mapping[str, np.ndarray]
    integer_params: frozenset[str]  # (a BF16 parameter's array holds its raw uint16 words)
    feed_ranks: Mapping[str, int]
    dim_of: Callable[[str], tuple[str, int] | None]

    def integers(self, name: str) -> np.ndarray | None:
        """The values of an integer constant or parameter."""
        found = self.constants.get(name)
        if found is None and name in self.integer_params:
            found = self.params[name]
        return found

    def rank(self, name: str, depth: int = 0) -> int | None:
        if name in self.feed_ranks:
            return self.feed_ranks[name]
        array = self.constants.get(name, self.params.get(name))
        if array is not None:
            return int(array.ndim)
        node = self.producers.get(name)
        if node is None or depth > _MAX_DEPTH:
            return None
        if node.op_type in _SAME_SHAPE:
            return self.rank(node.input[0], depth + 1)
        if node.op_type == "Unsqueeze":
            axes = self.constants.get(node.input[1])
            rank = self.rank(node.input[0], depth + 1)
            return None if axes is None or rank is None else rank + int(axes.size)
        if node.op_type == "Gather" and not _axis(node):
            data, indices = (self.rank(i, depth + 1) for i in node.input)
            return None if data is None or indices is None else data + indices - 1
        if node.op_type in _BROADCAST:
            ranks = [self.rank(i, depth + 1) for i in node.input]
            return None if None in ranks else max(r for r in ranks if r is not None)
        return None

    def feed_dim(self, name: str, axis: int, depth: int = 0) -> tuple[str, int] | None:
        """(feed, axis) whose size `name`'s dim `axis` always has, or None when not known."""
        if name in self.feed_ranks:
            return (name, axis) if 0 <= axis < self.feed_ranks[name] else None
        node = self.producers.get(name)
        if node is None or depth > _MAX_DEPTH:
            return None
        if node.op_type in _SAME_SHAPE:
            return self.feed_dim(node.input[0], axis, depth + 1)
        if node.op_type == "Gather" and not _axis(node):  # the ids' dims, then the table's
            rank = self.rank(node.input[1], depth + 1)
            if rank is None or axis >= rank:
                return None
            return self.feed_dim(node.input[1], axis, depth + 1)
        if node.op_type == "Unsqueeze":
            return self._unsqueezed_dim(node, axis, depth)
        if node.op_type in _BROADCAST:
            return self._broadcast_dim(node, axis, depth)
        return None

    def _unsqueezed_dim(
        self, node: onnx.NodeProto, axis: int, depth: int
    ) -> tuple[str, int] | None:
        axes = self.constants.get(node.input[1])
        rank = self.rank(node.input[0], depth + 1)
        if axes is None or rank is None:
            return None
        out_rank = rank + int(axes.size)
        inserted = {int(a) % out_rank for a in axes.reshape(-1)}
        if axis in inserted:
            return None  # a dim of 1
        return self.feed_dim(node.input[0], axis - sum(a < axis for a in inserted), depth + 1)

    def _broadcast_dim(self, node: onnx.NodeProto, axis: int, depth: int) -> tuple[str, int] | None:
        """A broadcast result's dim is a feed's when every input that has the dim has that
        same feed dim there (an input of 1 there would broadcast to another size)."""
        ranks = [self.rank(i, depth + 1) for i in node.input]
        if None in ranks:
            return None
        out_rank = max(r for r in ranks if r is not None)
        found = {
            self.feed_dim(i, axis - (out_rank - r), depth + 1)
            for i, r in zip(node.input, ranks, strict=True)
            if r is not None and axis - (out_rank - r) >= 0
        }
        return found.pop() if len(found) == 1 else None

    def shape_dims(self, shape: str) -> tuple[tuple[str, int], ...] | None:
        """The feed dim of each entry of a 1-D shape value: Shape(x) of the whole of x, or
        the Concat of one-integer values each read from a dim; None when one is not known."""
        node = self.producers.get(shape)
        dims: list[tuple[str, int] | None]
        if node is not None and node.op_type == "Shape" and not node.attribute:
            rank = self.rank(node.input[0])
            if rank is None:
                return None
            dims = [self.feed_dim(node.input[0], axis) for axis in range(rank)]
        elif node is not None and node.op_type == "Concat" and not _axis(node):
            read = [self.dim_of(part) for part in node.input]
            dims = [None if r is None else self.feed_dim(*r) for r in read]
        else:
            return None
        return None if None in dims else tuple(d for d in dims if d is not None)


def value_range(name: str, facts: GraphFacts, depth: int = 0) -> ValueRange | None:
    """The range of integer value `name`, or None when the nodes that made it say nothing
    this reading follows (feeds included: the session checks those on the host)."""
    if depth > _MAX_DEPTH:
        return None
    array = facts.integers(name)
    if array is not None:
        return _constant_range(array)
    node = facts.producers.get(name)
    rule = None if node is None else _RULES.get(node.op_type)
    if node is None or rule is None:
        return None

    def of(value: str) -> ValueRange | None:
        return value_range(value, facts, depth + 1)

    return rule(node, of, facts)


_Of = Callable[[str], ValueRange | None]


def cast_to(node: onnx.NodeProto) -> int:
    """A Cast node's target type."""
    return next(a.i for a in node.attribute if a.name == "to")


def _axis(node: onnx.NodeProto) -> int:
    return next((a.i for a in node.attribute if a.name == "axis"), 0)


def _constant_range(array: np.ndarray) -> ValueRange | None:
    if array.size == 0 or array.dtype.kind not in "iu":
        return None
    low, high = Bound(int(array.min())), Bound(int(array.max()))
    return ValueRange(low, high, True, NEVER_EMPTY)


def _same_values(node: onnx.NodeProto, of: _Of, _: GraphFacts) -> ValueRange | None:
    return of(node.input[0])


def _subset(node: onnx.NodeProto, of: _Of, _: GraphFacts) -> ValueRange | None:
    """Some of the input's values (a Slice, or a Gather from it): within its range, no more
    held for sure (`position_ids[:, :S]` of a constant arange)."""
    source = of(node.input[0])
    return None if source is None else ValueRange(source.low, source.high, exact=False)


def _cast(node: onnx.NodeProto, of: _Of, _: GraphFacts) -> ValueRange | None:
    to = cast_to(node)
    # Integers to integers only (a range read here is of integers); int64 -> int32 keeps the
    # values of shapes and positions, which are far inside int32.
    return of(node.input[0]) if to in INTEGER_TYPES else None


def _constant_of_shape(node: onnx.NodeProto, _of: _Of, facts: GraphFacts) -> ValueRange | None:
    """One number everywhere; empty exactly when the feed its dims are all of is."""
    value = next((a.t for a in node.attribute if a.name == "value"), None)
    if value is None or value.data_type not in INTEGER_TYPES:
        return None  # the default value is a float 0
    number = int(numpy_helper.to_array(value).reshape(-1)[0])
    return ValueRange(Bound(number), Bound(number), True, _empty_like(facts, node.input[0]))


def _empty_like(facts: GraphFacts, shape: str) -> str | None:
    """The feed a tensor of this shape is empty with: each of its dims, and no other."""
    dims = facts.shape_dims(shape)
    if dims is None or len({feed for feed, _ in dims}) != 1:
        return None
    feed = dims[0][0]
    return feed if {axis for _, axis in dims} == set(range(facts.feed_ranks[feed])) else None


def _add(node: onnx.NodeProto, of: _Of, _: GraphFacts) -> ValueRange | None:
    return _combine(of(node.input[0]), of(node.input[1]), subtract=False)


def _sub(node: onnx.NodeProto, of: _Of, _: GraphFacts) -> ValueRange | None:
    return _combine(of(node.input[0]), of(node.input[1]), subtract=True)


def _combine(a: ValueRange | None, b: ValueRange | None, *, subtract: bool) -> ValueRange | None:
    """a + b or a - b. Exact when one side is one value everywhere (a shift keeps which
    elements are the extremes). A broadcast result is empty when either side is."""
    if a is None or b is None:
        return None
    if subtract:
        low, high = a.low.plus(b.high.times(-1)), a.high.plus(b.low.times(-1))
    else:
        low, high = a.low.plus(b.low), a.high.plus(b.high)
    if low is None or high is None:
        return None
    exact = (a.exact and b.uniform) or (b.exact and a.uniform)
    return ValueRange(low, high, exact, _empty_with(a.empty_with, b.empty_with))


def _empty_with(a: str | None, b: str | None) -> str | None:
    if a == b or b == NEVER_EMPTY:
        return a
    return b if a == NEVER_EMPTY else None


def _mul(node: onnx.NodeProto, of: _Of, _: GraphFacts) -> ValueRange | None:
    """x times a number (Paddle's scale: x * 1 + 0 around position ids)."""
    a, b = of(node.input[0]), of(node.input[1])
    if a is None or b is None:
        return None
    if a.uniform and a.empty_with == NEVER_EMPTY:
        a, b = b, a
    if not (b.uniform and b.empty_with == NEVER_EMPTY):
        return None
    factor = b.low.const
    low, high = a.low.times(factor), a.high.times(factor)
    if factor < 0:
        low, high = high, low
    return ValueRange(low, high, a.exact, a.empty_with)


def _cumsum(node: onnx.NodeProto, of: _Of, facts: GraphFacts) -> ValueRange | None:
    """The running sum of one value v >= 0 along an axis of n: v, 2v, ..., n v (exclusive: 0,
    v, ..., (n - 1) v), n a feed dim where the summed tensor is ConstantOfShape of a shape
    whose dims are known (`times(1)` drops the dim when v is 0: all zeros)."""
    source = of(node.input[0])
    axis = facts.constants.get(node.input[1])
    if source is None or axis is None or not source.uniform or source.low.const < 0:
        return None
    producer = facts.producers.get(node.input[0])
    if producer is None or producer.op_type != "ConstantOfShape":
        return None
    dims = facts.shape_dims(producer.input[0])
    at = int(axis.reshape(-1)[0])
    if dims is None or not -len(dims) <= at < len(dims):
        return None  # the length along the axis is not known to be a feed dim
    dim, step = dims[at], source.low.const  # (reversed, the same values)
    if any(a.name == "exclusive" and a.i for a in node.attribute):
        return ValueRange(Bound(0), Bound(-step, step, dim).times(1), True, source.empty_with)
    return ValueRange(Bound(step), Bound(0, step, dim).times(1), True, source.empty_with)


_RULES: Final[dict[str, Callable[[onnx.NodeProto, _Of, GraphFacts], ValueRange | None]]] = {
    **dict.fromkeys(_SAME_VALUES, _same_values),
    "Slice": _subset,
    "Gather": _subset,
    "Cast": _cast,
    "ConstantOfShape": _constant_of_shape,
    "Add": _add,
    "Sub": _sub,
    "Mul": _mul,
    "CumSum": _cumsum,
}
