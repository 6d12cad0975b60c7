"""OpDef: the one place an operator's slots, typed attrs, shape/dtype rule, cost and cases live.

The ONNX lowering of each op lives in the mirrored module under executor/lower/.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from graph_proto.types import DType, Shape, numel
from validator.diagnostics import Code


class GraphError(ValueError):
    """A problem in the uploaded graph (never in our code); messages say expected vs got."""

    code: ClassVar[Code] = Code.SHAPE_MISMATCH


class ShapeError(GraphError):
    """Input shapes or attribute values of one op are inconsistent."""

    code = Code.SHAPE_MISMATCH


class AxisError(ShapeError):
    """An axis, or the rank it is applied to, is out of range."""

    code = Code.AXIS_INVALID


class EmptyDimError(ShapeError):
    """A zero-size dimension reaches an op that needs at least one element along it."""

    code = Code.EMPTY_DIM


class AttrError(GraphError):
    """An attribute value is out of range or inconsistent with another one."""

    code = Code.ATTR_VALUE


class DTypeError(GraphError):
    """An input dtype is not accepted, or differs from another input of the same type variable."""

    code = Code.DTYPE_MISMATCH


class UnsupportedError(GraphError):
    """A valid Paddle op or attribute value the ONNX lowering cannot compute exactly: refused
    here, before lowering, rather than approximated."""

    code = Code.LOWERING_UNSUPPORTED


Scalar = int | float | bool


@dataclass(frozen=True, slots=True)
class TensorType:
    """What inference knows of one variable: dtype, dims (-1 unknown) and, for small integer
    tensors computed from shapes and constants, the values themselves (shape arithmetic)."""

    dtype: DType
    shape: Shape
    value: tuple[Scalar, ...] | None = None
    # Upper bounds of dims the data decides (-1 in shape: NMS keeps some boxes), from attrs and
    # input dims; -1 where none is known. Budgets count the bound, runs check against it.
    bound: Shape | None = None
    # The known elements of a shape vector whose value is not known whole (None where a dim is
    # -1): `shape` of a [-1, 32, 8, 8] tensor is (None, 32, 8, 8), so that slicing its known
    # dims gives a known value (`paddle.shape(x)[2:]`, the size of an upsampling).
    partial: tuple[int | None, ...] | None = None

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def known(self) -> bool:
        return all(d >= 0 for d in self.shape)

    def numel(self) -> int:
        """Element count with unknown dims counted as 1 (callers bound them first)."""
        return numel(tuple(max(d, 1) for d in self.shape))


@dataclass(frozen=True, slots=True)
class NoAttrs:
    """Attribute schema of ops that take no attributes."""


@dataclass(frozen=True, slots=True)
class In:
    slot: str  # Paddle parameter name, verbatim ("X", "Filter")
    type_var: str | DType | None = "T"  # slots sharing a type variable share a dtype; None: any
    variadic: bool = False  # Paddle "duplicable": several arguments in one slot
    optional: bool = False  # Paddle "dispensable": may be absent or empty


@dataclass(frozen=True, slots=True)
class Out:
    slot: str
    type_var: str | DType = "T"  # a type variable, or a fixed dtype (arg_max -> INT64)
    unused: bool = False  # training-only output (XShape, SavedMean): must have no readers
    optional: bool = False  # may be absent or empty
    variadic: bool = False  # several arguments (split)
    inplace_of: str | None = None  # may alias this input slot's var (batch_norm MeanOut = Mean)


@dataclass(frozen=True, slots=True)
class Case:
    """One declared example: inputs by slot, attrs as Python values, and what must happen.

    `expect` is a numpy reference `(*inputs in slot order, attrs) -> array or tuple of arrays`;
    the generic test checks inferred shapes and dtypes against it (and the executor, values).
    `raises` is a fragment of the expected GraphError message, `code` its diagnostic code.
    """

    inputs: Mapping[str, np.ndarray | tuple[np.ndarray, ...]]
    attrs: Mapping[str, Any] = field(default_factory=dict)
    expect: Callable[..., Any] | None = None
    raises: str | None = None
    code: Code | None = None
    rtol: float = 1e-5
    atol: float = 1e-6


# A Shape, a TensorType, or a list of those (tuples of them for variadic outputs).
InferResult = Shape | TensorType | list[Any]


class Couples(Exception):
    """Raised by a batch rule: running rows together would not equal running them one by one.
    The message completes "block 0, op 17 (reduce_mean): ..." (validator/batch.py)."""


@dataclass(frozen=True, slots=True)
class BatchView:
    """What a batch rule sees of one op: where each input argument carries the batch
    dimension (None: it does not), the compile-time types, and the decoded attrs. Every
    slot is listed; an absent optional slot has no arguments."""

    axes: Mapping[str, tuple[int | None, ...]]
    types_in: Mapping[str, tuple[TensorType, ...]]
    types_out: Mapping[str, tuple[TensorType, ...]]  # used output slots only
    attrs: Any

    def axis(self, slot: str) -> int | None:
        """The batch axis of a single-argument slot (None when unbatched or absent)."""
        return next((a for a in self.axes.get(slot, ()) if a is not None), None)

    def type(self, slot: str) -> TensorType:
        return self.types_in[slot][0]

    def batched(self) -> list[str]:
        return [slot for slot, axes in self.axes.items() if any(a is not None for a in axes)]


# A batch rule gets an op's BatchView (called only when some input carries the batch) and
# returns the batch axis of every used output (an int), or one per used output slot (None:
# that slot carries no batch); it raises Couples when the rows would interact.
BatchRule = Callable[[BatchView], "int | Mapping[str, int | None]"]


@dataclass(frozen=True, slots=True, kw_only=True)
class OpDef:
    """One registered op.

    `infer` gets one TensorType per input slot (None for an absent optional slot, a tuple for a
    variadic one) and the decoded attrs; it returns one result per used output, in order: a
    Shape (dtype from the output's type variable) or a TensorType (dtype given by the rule), or
    a list of them when the op has several used outputs.
    `cost` estimates FLOPs from the same inputs, the inferred outputs and attrs; the default is
    one FLOP per output element.
    """

    op_type: str
    doc: str
    inputs: tuple[In, ...]
    outputs: tuple[Out, ...]
    types: Mapping[str, frozenset[DType]]
    attrs: type[Any] = NoAttrs
    ignored_attrs: frozenset[str] = frozenset()  # Paddle "extra" attrs harmless for this op
    infer: Callable[..., InferResult]
    cost: Callable[..., int] | None = None
    cases: tuple[Case, ...] = ()
    # How the op treats the batch dimension (rules: validator/ops/_batch.py). None: undeclared,
    # which makes any program that feeds it batched data not batchable.
    batch: BatchRule | None = None

    # The outputs the rule returns, in order: read on every inference of the op, so kept.
    used_outputs: tuple[Out, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "used_outputs", tuple(o for o in self.outputs if not o.unused))

    def slot(self, name: str) -> In | None:
        return next((s for s in self.inputs if s.slot == name), None)

    def out_slot(self, name: str) -> Out | None:
        return next((s for s in self.outputs if s.slot == name), None)


class Registry:
    """Op type -> OpDef, built once from explicit family tuples; duplicates are an error."""

    def __init__(self, *families: tuple[OpDef, ...]) -> None:
        self._ops: dict[str, OpDef] = {}
        for op in (op for family in families for op in family):
            if op.op_type in self._ops:
                raise ValueError(f"op type {op.op_type!r} is defined twice")
            self._ops[op.op_type] = op

    def get(self, op_type: str) -> OpDef | None:
        return self._ops.get(op_type)

    def __contains__(self, op_type: object) -> bool:
        return op_type in self._ops

    def __iter__(self) -> Iterator[OpDef]:
        return iter(self._ops.values())

    def __len__(self) -> int:
        return len(self._ops)

    def names(self) -> frozenset[str]:
        return frozenset(self._ops)
