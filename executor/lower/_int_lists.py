"""Int lists (shapes, axes, starts, sections...) as int64 ONNX vectors, built from ints known now
and pieces only the run time knows; shared by the manipulation and slicing lowerings."""

from __future__ import annotations

from collections.abc import Sequence

from executor.lower._builder import OnnxBuilder, Value
from graph_proto.types import DType
from validator import TensorType
from validator.ops import Operand, int_operand

Piece = str | Sequence[int]  # an int64 1-D ONNX value, or ints known at conversion
Given = Value | tuple[Value, ...] | None  # an emitter argument: one tensor, a list slot, absent


def concat_ints(b: OnnxBuilder, pieces: Sequence[Piece]) -> str:
    """One int64 vector of the pieces in order; neighbouring known ints share one constant."""
    merged: list[str | list[int]] = []
    for piece in pieces:
        if isinstance(piece, str):
            merged.append(piece)
        elif merged and isinstance(merged[-1], list):
            merged[-1].extend(piece)
        elif piece:
            merged.append(list(piece))
    names = [p if isinstance(p, str) else b.ints(p) for p in merged]
    if not names:
        return b.ints([])
    return names[0] if len(names) == 1 else b.op("Concat", *names, axis=0)


def dims(b: OnnxBuilder, x: Value, start: int, end: int) -> Piece:
    """X's dims start..end-1: ints when all are known, else a slice of Shape(X)."""
    if start >= end or all(d >= 0 for d in x.shape[start:end]):
        return list(x.shape[start:end])
    return b.op("Shape", x.name, start=start, end=end)


def may_be_empty(x: Value) -> bool:
    """Whether X can hold no element at run time (a 0 dim, or an unknown one)."""
    return any(d <= 0 for d in x.shape)


def as_int64(b: OnnxBuilder, t: Value) -> str:
    """A 1-D int64 vector of an int tensor's elements (a 0-D tensor becomes one element)."""
    name = t.name if t.rank == 1 else b.op("Reshape", t.name, b.ints([-1]))
    return name if t.dtype == DType.INT64 else b.cast(name, DType.INT64)


def _types(given: Given) -> TensorType | tuple[TensorType, ...] | None:
    if isinstance(given, tuple):
        return tuple(v.type for v in given)
    return None if given is None else given.type


def int_values(attr: Sequence[int], *sources: tuple[str, Given]) -> Operand:
    """The list as the validator reads it (first given tensor source, else the attribute), as
    known at conversion: None for an element only the run time knows."""
    return int_operand(attr, *((slot, _types(given)) for slot, given in sources))


def int_vector(
    b: OnnxBuilder, attr: Sequence[int], *sources: tuple[str, Given]
) -> tuple[str, Operand]:
    """The list as an int64 vector, and its elements as known at conversion (see int_values)."""
    static = int_values(attr, *sources)
    if None not in static:
        return b.ints([v for v in static if v is not None]), static
    for _, given in sources:
        if isinstance(given, tuple) and given:
            pieces = [
                as_int64(b, t) if v is None else [v] for t, v in zip(given, static, strict=True)
            ]
            return concat_ints(b, pieces), static
        if isinstance(given, Value):
            return as_int64(b, given), static
    raise AssertionError("an unknown element must come from a tensor source")
