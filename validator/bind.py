"""Binds one OpDesc to its OpDef: slot names and arity, and typed attrs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from graph_proto import framework_pb2 as pb
from validator.attrs import AttrDecodeError, decode_attrs, raw_attrs
from validator.diagnostics import Code
from validator.ops import OpDef, TensorType


class BindError(ValueError):
    def __init__(self, code: Code, message: str, var: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.var = var


@dataclass(frozen=True, slots=True)
class BoundOp:
    """An op checked against its OpDef: arguments per slot (empty slots dropped) and attrs."""

    index: int
    block: int
    op_def: OpDef
    inputs: Mapping[str, tuple[str, ...]]
    outputs: Mapping[str, tuple[str, ...]]
    attrs: Any
    # The bound ops of each sub-block the op owns (conditional_block, while), in order.
    blocks: tuple[tuple[BoundOp, ...], ...] = ()
    # What inference settled at this op's point, by var: each tensor it reads and each it
    # writes (recorded by the interpretation; the lowering reads them as JAX lowerings read
    # avals_in/out). A sub-block op's are those of its owner's last pass: a while body's are
    # under the loop-carried types, not those the loop vars have before the loop.
    types_in: Mapping[str, TensorType] = field(default_factory=dict)
    types_out: Mapping[str, TensorType] = field(default_factory=dict)

    @property
    def op_type(self) -> str:
        return self.op_def.op_type

    def reads(self) -> list[str]:
        return [name for names in self.inputs.values() for name in names]

    def writes(self) -> list[str]:
        return [name for names in self.outputs.values() for name in names]


def bind(op: pb.OpDesc, op_def: OpDef, index: int, block: int) -> BoundOp:
    inputs = _slots(op.inputs, {s.slot: (s.variadic, s.optional) for s in op_def.inputs}, "input")
    outputs = _slots(
        op.outputs, {s.slot: (s.variadic, s.optional or s.unused) for s in op_def.outputs}, "output"
    )
    try:
        attrs = decode_attrs(op_def.attrs, raw_attrs(op), op_def.ignored_attrs)
    except AttrDecodeError as e:
        raise BindError(e.code, str(e)) from None
    return BoundOp(index, block, op_def, inputs, outputs, attrs)


def _slots(
    given: Any, declared: Mapping[str, tuple[bool, bool]], kind: str
) -> dict[str, tuple[str, ...]]:
    bound: dict[str, tuple[str, ...]] = {}
    for var in given:
        if var.parameter not in declared:
            raise BindError(
                Code.SLOT_UNKNOWN,
                f"expected {kind} slots from {sorted(declared)}, got unknown {var.parameter!r}",
            )
        if var.parameter in bound:
            raise BindError(Code.SLOT_ARITY, f"{kind} slot {var.parameter!r} is given twice")
        variadic, _ = declared[var.parameter]
        args = tuple(var.arguments)
        if len(args) > 1 and not variadic:
            raise BindError(
                Code.SLOT_ARITY,
                f"{kind} slot {var.parameter!r}: expected 1 variable, got {len(args)}",
            )
        if len(set(args)) != len(args) and kind == "output":
            raise BindError(Code.SLOT_ARITY, f"output slot {var.parameter!r} repeats a variable")
        if args:
            bound[var.parameter] = args
    for slot, (_, optional) in declared.items():
        if not optional and slot not in bound:
            raise BindError(Code.SLOT_MISSING, f"{kind} slot {slot!r} is required, got none")
    return bound
