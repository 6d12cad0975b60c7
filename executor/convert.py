"""lower(): a ValidatedProgram becomes a self-contained ONNX model (graph inputs/outputs by col)."""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from executor.errors import HostIndexCheck, IndexCheck, LoopTripLimitExceeded, TensorTooLarge
from executor.lower import (
    BOUNDARY_OPS,
    EMITTERS,
    IR_VERSION,
    ONNX_OPSET,
    LoweringError,
    OnnxBuilder,
    Value,
    control,
)
from executor.lower._builder import ONNX_DTYPE
from graph_proto.types import DType
from validator import ValidatedProgram
from validator.bind import BoundOp
from validator.infer import infer_op
from validator.ops._def import TensorType

# Hidden graph outputs after the fetches, in a model with loops: true when some loop needed
# more iterations than the policy's bound, or grew a loop var past the tensor byte cap (the
# session then raises, never returning what the loop had when it stopped).
LOOP_BOUND_EXCEEDED: Final = "graphgate:loop_bound_exceeded"
LOOP_TENSOR_TOO_LARGE: Final = "graphgate:loop_tensor_too_large"
_HIDDEN: Final = {"trips": LOOP_BOUND_EXCEEDED, "bytes": LOOP_TENSOR_TOO_LARGE}


@dataclass(frozen=True, slots=True)
class Lowered:
    """The ONNX model, and which ONNX value holds each Paddle variable (for the shape cross-check)."""

    model: onnx.ModelProto
    values: Mapping[str, Value]
    index_checks: Mapping[str, IndexCheck] = field(default_factory=dict)  # by guard node name
    # Graph outputs after the fetches: _HIDDEN loop flags, then select_input Masks.
    hidden_outputs: tuple[str, ...] = ()
    host_checks: tuple[HostIndexCheck, ...] = ()  # made on the feeds before running


def lower(program: ValidatedProgram) -> Lowered:
    b = OnnxBuilder()
    b.feeds = frozenset(spec.name for spec in program.inputs)
    env: dict[str, Value] = {}
    for spec in program.inputs:
        env[spec.name] = Value(spec.name, TensorType(spec.dtype, spec.dims))
    initializers = [
        _initializer(name, array, program.types[name]) for name, array in program.params.items()
    ]
    for name in program.params:
        env[name] = Value(name, program.types[name])
    inputs = [_value_info(spec.name, env[spec.name].type, symbolic=True) for spec in program.inputs]
    # NOTE: types are re-inferred op by op, not read from program.types: a while rewrites its
    # loop vars, so a name's type before the loop differs from the one program.types keeps.
    types: dict[str, TensorType] = {name: value.type for name, value in env.items()}
    limits = (program.policy.max_loop_trips, program.policy.max_tensor_bytes)
    masks: list[tuple[int, Value]] = []
    flags = control.merge_flags(b, _lower_ops(b, program.ops, env, types, limits, masks))
    outputs = _outputs(b, program, env)
    for kind, flag in flags.items():
        b.nodes.append(helper.make_node("Identity", [flag], [_HIDDEN[kind]], name=_HIDDEN[kind]))
        outputs.append(helper.make_tensor_value_info(_HIDDEN[kind], TensorProto.BOOL, []))
    outputs.extend(control.branch_mask_outputs(b, masks))
    hidden = tuple(info.name for info in outputs[len(program.outputs) :])
    graph = helper.make_graph(
        b.nodes,
        "graphgate",
        inputs,
        outputs,
        initializers + b.initializers,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", ONNX_OPSET)],
        ir_version=IR_VERSION,
        producer_name="graphgate",
    )
    return Lowered(model, env, b.index_checks, hidden, tuple(b.host_checks))


def check_loop_bound(
    program: ValidatedProgram, names: Sequence[str], values: Sequence[Any]
) -> None:
    """Raises the typed error of the first hidden loop flag the run set."""
    raised = {
        name
        for name, value in zip(names, values, strict=True)
        if name in _HIDDEN.values() and bool(np.asarray(value))
    }
    if LOOP_BOUND_EXCEEDED in raised:
        raise LoopTripLimitExceeded(
            f"a while loop ran past the policy's trip bound: expected at most "
            f"{program.policy.max_loop_trips} iterations, got more"
        )
    if LOOP_TENSOR_TOO_LARGE in raised:
        raise TensorTooLarge(
            f"a while loop grew a loop var past the policy's tensor byte cap: expected at most "
            f"{program.policy.max_tensor_bytes} bytes, got more"
        )


def _lower_ops(
    b: OnnxBuilder,
    ops: Sequence[BoundOp],
    env: dict[str, Value],
    types: MutableMapping[str, TensorType],
    limits: tuple[int | None, int],
    masks: list[tuple[int, Value]] | None = None,
) -> control.Flags:
    """Lowers ops in order (a block's, or block 0's) into the builder's current node list;
    returns the loop flags raised on the way. `masks` (block 0): collects the select_input
    Masks the session needs to check outputs against the branch that ran."""

    def lower_block(
        b: OnnxBuilder,
        ops: Sequence[BoundOp],
        env: dict[str, Value],
        types: MutableMapping[str, TensorType],
    ) -> control.Flags:
        return _lower_ops(b, ops, env, types, limits)

    flags: control.Flags = {}
    for op in ops:
        if op.op_type in control.BLOCK_OPS:
            inferred = infer_op(op, types)
            with b.naming(f"{op.block}_{op.index}_{op.op_type}"):
                produced, raised = control.lower_block_op(
                    b, op, env, types, inferred, lower_block, limits
                )
            for kind, raised_flags in raised.items():
                flags.setdefault(kind, []).extend(raised_flags)
        elif op.op_type not in BOUNDARY_OPS:
            inferred = infer_op(op, types)
            if masks is not None and (mask := control.wanted_mask(op, env, types)):
                masks.append(mask)
            produced = _lower_op(b, op, env, inferred)
        else:
            continue
        types.update(inferred)
        env.update(produced)
    return flags


def _lower_op(
    b: OnnxBuilder, op: BoundOp, env: Mapping[str, Value], types: Mapping[str, TensorType]
) -> dict[str, Value]:
    emit = EMITTERS.get(op.op_type)
    if emit is None:
        raise LoweringError(f"op {op.op_type!r} has no ONNX lowering")
    inputs: list[Any] = []
    for slot in op.op_def.inputs:
        names = op.inputs.get(slot.slot)
        if names is None:
            inputs.append(None)
        else:
            inputs.append(tuple(env[n] for n in names) if slot.variadic else env[names[0]])
    used = op.op_def.used_outputs
    b.outputs = [
        tuple(types[n] for n in op.outputs.get(o.slot, ()))
        if o.variadic
        else types[op.outputs[o.slot][0]]
        for o in used
        if o.slot in op.outputs
    ]
    b.in_block = op.block != 0
    with b.naming(
        f"{op.block}_{op.index}_{op.op_type}" if op.block else f"{op.index}_{op.op_type}"
    ):
        result = emit(b, *inputs, op.attrs)
    results = result if isinstance(result, list) else [result]
    produced: dict[str, Value] = {}
    for out, value in zip(used, results, strict=True):
        names = op.outputs.get(out.slot, ())
        onnx_names = value if out.variadic else (value,)
        for name, onnx_name in zip(names, onnx_names, strict=False):
            produced[name] = Value(onnx_name, types[name])
    return produced


def _outputs(
    b: OnnxBuilder, program: ValidatedProgram, env: Mapping[str, Value]
) -> list[onnx.ValueInfoProto]:
    infos = []
    named: set[str] = {spec.name for spec in program.inputs}
    for spec in program.outputs:
        value = env[spec.name]
        name = spec.name
        if value.name != name or name in named:
            # ONNX names the output after the Paddle var; a fed var fetched as is gets a copy.
            name = spec.name if spec.name not in named else f"{spec.name}:output"
            b.nodes.append(
                helper.make_node("Identity", [value.name], [name], name=f"fetch/{spec.name}")
            )
        named.add(name)
        infos.append(_value_info(name, program.types[spec.name], symbolic=True))
    return infos


def _value_info(name: str, t: TensorType, *, symbolic: bool) -> onnx.ValueInfoProto:
    dims: list[int | str | None] = [
        d if d >= 0 else (f"{name}:{axis}" if symbolic else None) for axis, d in enumerate(t.shape)
    ]
    return helper.make_tensor_value_info(name, ONNX_DTYPE[t.dtype], dims)


def _initializer(name: str, array: np.ndarray, t: TensorType) -> onnx.TensorProto:
    if t.dtype == DType.BF16:
        # numpy has no bfloat16: the raw uint16 words go in as they are.
        return helper.make_tensor(
            name, TensorProto.BFLOAT16, array.shape, array.tobytes(), raw=True
        )
    return numpy_helper.from_array(np.ascontiguousarray(array), name)
