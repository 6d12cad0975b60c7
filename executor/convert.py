"""lower(): a ValidatedProgram becomes a self-contained ONNX model (graph inputs/outputs by col)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from executor.lower import (
    BOUNDARY_OPS,
    EMITTERS,
    IR_VERSION,
    ONNX_OPSET,
    LoweringError,
    OnnxBuilder,
    Value,
)
from executor.lower._builder import ONNX_DTYPE
from graph_proto.types import DType
from validator import ValidatedProgram
from validator.bind import BoundOp
from validator.ops._def import TensorType


@dataclass(frozen=True, slots=True)
class Lowered:
    """The ONNX model, and which ONNX value holds each Paddle variable (for the shape cross-check)."""

    model: onnx.ModelProto
    values: Mapping[str, Value]


def lower(program: ValidatedProgram) -> Lowered:
    b = OnnxBuilder()
    env: dict[str, Value] = {}
    for spec in program.inputs:
        env[spec.name] = Value(spec.name, program.types[spec.name])
    initializers = [
        _initializer(name, array, program.types[name]) for name, array in program.params.items()
    ]
    for name in program.params:
        env[name] = Value(name, program.types[name])
    for op in program.ops:
        if op.op_type not in BOUNDARY_OPS:
            env.update(_lower_op(b, op, env, program.types))
    outputs = _outputs(b, program, env)
    graph = helper.make_graph(
        b.nodes,
        "graphgate",
        [
            _value_info(spec.name, program.types[spec.name], symbolic=True)
            for spec in program.inputs
        ],
        outputs,
        initializers + b.initializers,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", ONNX_OPSET)],
        ir_version=IR_VERSION,
        producer_name="graphgate",
    )
    return Lowered(model, env)


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
    with b.naming(f"{op.index}_{op.op_type}"):
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
