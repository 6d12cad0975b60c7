"""Shape and dtype inference for one bound op: the same code runs at compile time and run time."""

from __future__ import annotations

import dataclasses
from collections import ChainMap
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any, Final, cast

from graph_proto.types import DType, Shape, numel
from validator.bind import BoundOp
from validator.diagnostics import Code
from validator.ops import DTypeError, GraphError, In, OpDef, Out, ShapeError, TensorType
from validator.ops.control import CONDITIONAL_BLOCK_OP, WHILE_OP

FEED = "feed"
# Passes over a loop body before every loop-carried dim is given up as unknown (each pass that
# changes anything turns a dim unknown or drops a value, so this only bounds the work).
_LOOP_PASSES: Final = 4


class LoopCarriedError(ShapeError):
    """A loop-carried variable changes dtype or rank across an iteration."""

    code = Code.LOOP_CARRIED_TYPE


class BodyError(GraphError):
    """An op inside a sub-block is inconsistent; carries where, and the cause's code."""

    def __init__(self, op: BoundOp, error: GraphError) -> None:
        super().__init__(str(error))
        self.op: BoundOp = error.op if isinstance(error, BodyError) else op
        self.cause: GraphError = error.cause if isinstance(error, BodyError) else error
        self.code = self.cause.code  # type: ignore[misc]


def scope_over(*outer: Mapping[str, TensorType]) -> MutableMapping[str, TensorType]:
    """A fresh layer for a sub-block's vars over the enclosing ones (which it never writes)."""
    return ChainMap({}, *cast(list[MutableMapping[str, TensorType]], list(outer)))


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
    if bound.blocks:
        return _infer_block_op(bound, types)
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


def infer_recorded(bound: BoundOp, types: Mapping[str, TensorType]) -> BoundOp:
    """infer_op, with its result recorded on the op: the types it reads and writes here, and
    for a block op, its sub-block's ops recorded under the types of the last pass over them."""
    if not bound.blocks:
        inferred = infer_op(bound, types)
        body: tuple[tuple[BoundOp, ...], ...] = ()
    else:
        recorded: list[BoundOp] = []
        inferred = _infer_block_op(bound, types, recorded)
        body = (tuple(recorded),)
    # The feed op reads the feed holder, which is no tensor.
    reads = {} if bound.op_type == FEED else {name: types[name] for name in bound.reads()}
    return dataclasses.replace(bound, types_in=reads, types_out=inferred, blocks=body)


def infer_block(
    ops: Sequence[BoundOp],
    types: MutableMapping[str, TensorType],
    recorded: list[BoundOp] | None = None,
) -> MutableMapping[str, TensorType]:
    """Infers a sub-block's ops in order into `types` (a layer over the enclosing ones);
    `recorded`, when given, gets each op with its types (infer_recorded)."""
    for op in ops:
        try:
            if recorded is None:
                types.update(infer_op(op, types))
            else:
                recorded.append(infer_recorded(op, types))
                types.update(recorded[-1].types_out)
        except GraphError as e:
            raise BodyError(op, e) from None
    return types


def _infer_block_op(
    bound: BoundOp, types: Mapping[str, TensorType], recorded: list[BoundOp] | None = None
) -> dict[str, TensorType]:
    infer_values(bound.op_def, gather_inputs(bound, types), bound.attrs)  # the op's own checks
    (body,) = bound.blocks
    written = bound.outputs.get("Out", ())
    if bound.op_type == CONDITIONAL_BLOCK_OP:
        # An Out var defined before keeps its value when the branch does not run.
        inner = infer_block(body, scope_over(types), recorded)
        return {
            name: merge_carried(name, types[name], inner[name], "branch var")
            if name in types
            else inner[name]
            for name in written
        }
    assert bound.op_type == WHILE_OP, bound.op_type
    return loop_carried_types(bound, types, recorded)


def loop_carried_types(
    bound: BoundOp, types: Mapping[str, TensorType], recorded: list[BoundOp] | None = None
) -> dict[str, TensorType]:
    """The types of a while's loop vars (Out) over zero or more iterations: each iteration's
    types merged with the ones before (dims that change become unknown) until nothing changes.
    The last pass starts from the types returned, so `recorded` keeps the body ops of that one."""
    (body,) = bound.blocks
    carried = bound.outputs.get("Out", ())
    state = {name: types[name] for name in carried}
    for _ in range(_LOOP_PASSES):
        merged = _one_iteration(body, carried, state, types, recorded)
        if merged == state:
            return state
        state = merged
    state = {name: TensorType(t.dtype, (-1,) * t.rank) for name, t in state.items()}
    return _one_iteration(body, carried, state, types, recorded)


def _one_iteration(
    body: Sequence[BoundOp],
    carried: Sequence[str],
    state: Mapping[str, TensorType],
    types: Mapping[str, TensorType],
    recorded: list[BoundOp] | None,
) -> dict[str, TensorType]:
    if recorded is not None:
        recorded.clear()  # only the last pass's types hold for every iteration
    after = infer_block(body, scope_over(state, types), recorded)
    return {name: merge_carried(name, state[name], after[name]) for name in carried}


def merge_carried(
    name: str, before: TensorType, after: TensorType, what: str = "loop var"
) -> TensorType:
    """The type of a var that is `before` or `after` depending on the data (dims that differ
    become unknown); dtype and rank must agree."""
    if before.dtype != after.dtype or before.rank != after.rank:
        every, when = (
            ("on every iteration", "after one")
            if what == "loop var"
            else ("whether the branch runs or not", "when it runs")
        )
        raise LoopCarriedError(
            f"{what} {name!r}: expected {before.dtype.label}{list(before.shape)} {every}, "
            f"got {after.dtype.label}{list(after.shape)} {when}"
        )
    shape = tuple(a if a == b else -1 for a, b in zip(before.shape, after.shape, strict=True))
    value = before.value if before.value == after.value and shape == before.shape else None
    return TensorType(before.dtype, shape, value)


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
    "BodyError",
    "GraphError",
    "LoopCarriedError",
    "bind_dtypes",
    "check_dims",
    "gather_inputs",
    "infer_block",
    "infer_op",
    "infer_recorded",
    "infer_values",
    "scope_over",
    "tensor_bytes",
]
