"""Shape and dtype inference for one bound op: the same code runs at compile time and run time."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from graph_proto.types import DType, Shape, numel
from validator.bind import BoundOp
from validator.ops._def import DTypeError, GraphError, In, OpDef, Out, ShapeError, TensorType

FEED = "feed"


def gather_inputs(
    bound: BoundOp, types: Mapping[str, TensorType]
) -> list[TensorType | tuple[TensorType, ...] | None]:
    """One entry per declared input slot, in declaration order; callers ensured every read exists."""
    if bound.op_def.op_type == FEED:
        # The feed op's input is the feed holder; what it yields is the declared feed spec.
        return [types[bound.outputs["Out"][0]]]
    values: list[TensorType | tuple[TensorType, ...] | None] = []
    for slot in bound.op_def.inputs:
        names = bound.inputs.get(slot.slot)
        if names is None:
            values.append(None)
        elif slot.variadic:
            values.append(tuple(types[n] for n in names))
        else:
            values.append(types[names[0]])
    return values


def bind_dtypes(
    op_def: OpDef, values: Sequence[TensorType | tuple[TensorType, ...] | None]
) -> dict[str, DType]:
    """Checks each input dtype against its slot's type variable; returns the bindings."""
    bindings: dict[str, DType] = {}
    for slot, value in zip(op_def.inputs, values, strict=True):
        if value is None or slot.type_var is None:
            continue
        for tensor in value if isinstance(value, tuple) else (value,):
            _bind_one(op_def, slot, tensor.dtype, bindings)
    return bindings


def _bind_one(op_def: OpDef, slot: In, dtype: DType, bindings: dict[str, DType]) -> None:
    type_var = slot.type_var
    if isinstance(type_var, DType):
        if dtype != type_var:
            raise DTypeError(f"input {slot.slot!r}: expected {type_var.label}, got {dtype.label}")
        return
    assert type_var is not None
    allowed = op_def.types[type_var]
    if dtype not in allowed:
        names = ", ".join(sorted(d.label for d in allowed))
        raise DTypeError(f"input {slot.slot!r}: expected one of [{names}], got {dtype.label}")
    bound = bindings.setdefault(type_var, dtype)
    if bound != dtype:
        raise DTypeError(
            f"input {slot.slot!r}: expected {bound.label} like the other {type_var} inputs, "
            f"got {dtype.label}"
        )


def infer_values(
    op_def: OpDef, values: Sequence[TensorType | tuple[TensorType, ...] | None], attrs: Any
) -> list[TensorType | tuple[TensorType, ...]]:
    """Checks dtypes and runs the op's rule: one result per used output (a tuple if variadic)."""
    bindings = bind_dtypes(op_def, values)
    result = op_def.infer(*values, attrs)
    used = op_def.used_outputs
    results: list[Any] = result if isinstance(result, list) else [result]
    if len(results) != len(used):
        raise AssertionError(
            f"{op_def.op_type}: rule returned {len(results)} results for {len(used)}"
        )
    return [
        tuple(_typed(out, item, bindings) for item in value)
        if out.variadic
        else _typed(out, value, bindings)
        for out, value in zip(used, results, strict=True)
    ]


def infer_op(bound: BoundOp, types: Mapping[str, TensorType]) -> dict[str, TensorType]:
    """Output name -> inferred type for every used output of the op; raises GraphError."""
    results = infer_values(bound.op_def, gather_inputs(bound, types), bound.attrs)
    inferred: dict[str, TensorType] = {}
    for out, value in zip(bound.op_def.used_outputs, results, strict=True):
        names = bound.outputs.get(out.slot, ())
        items = value if isinstance(value, tuple) else (value,)
        if out.variadic and len(items) != len(names):
            raise ShapeError(
                f"output slot {out.slot!r}: expected {len(items)} variables, got {len(names)}"
            )
        inferred.update(zip(names, items, strict=False))
    return inferred


def _typed(out: Out, value: Shape | TensorType, bindings: Mapping[str, DType]) -> TensorType:
    if isinstance(value, TensorType):
        return value
    if isinstance(out.type_var, DType):
        return TensorType(out.type_var, value)
    dtype = bindings.get(out.type_var)
    if dtype is None:
        raise AssertionError(f"output {out.slot!r}: type variable {out.type_var} is unbound")
    return TensorType(dtype, value)


def check_dims(tensor: TensorType) -> None:
    """Inferred dims must be -1 or non-negative (a rule bug or hostile attrs otherwise)."""
    if any(d < -1 for d in tensor.shape):
        raise ShapeError(f"expected dims >= -1, got {list(tensor.shape)}")


def tensor_bytes(tensor: TensorType) -> int:
    return numel(tuple(max(d, 0) for d in tensor.shape)) * tensor.dtype.itemsize


__all__ = [
    "GraphError",
    "bind_dtypes",
    "check_dims",
    "gather_inputs",
    "infer_op",
    "infer_values",
    "tensor_bytes",
]
