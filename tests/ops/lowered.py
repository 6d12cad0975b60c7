"""One declared op case through its op's ONNX lowering: a one-op model built by the op's
emitter, gated, and run by onnxruntime on the case inputs. test_lowering.py compares it with the
numpy reference; test_batch_rules.py runs it on batches."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime as ort
from onnx import helper

from executor import gate
from executor.lower import EMITTERS, IR_VERSION, ONNX_OPSET, OnnxBuilder, Value
from executor.lower._builder import ONNX_DTYPE
from tests.ops.cases import decoded_attrs, tensor_type
from validator.infer import infer_values
from validator.ops._def import Case, OpDef, TensorType


def _value_info(name: str, t: TensorType) -> Any:
    return helper.make_tensor_value_info(
        name, ONNX_DTYPE[t.dtype], [d if d >= 0 else None for d in t.shape]
    )


def run_lowered(op: OpDef, case: Case) -> list[np.ndarray]:
    """Builds a one-op ONNX model from the op's emitter, gates it, runs it on the case inputs."""
    attrs = decoded_attrs(op, case)
    b = OnnxBuilder()
    inputs: list[Any] = []
    graph_inputs, feeds = [], {}
    for slot in op.inputs:
        value = case.inputs.get(slot.slot)
        arrays = value if isinstance(value, tuple) else (value,) if value is not None else ()
        values = []
        for i, array in enumerate(arrays):
            name = f"{slot.slot}_{i}"
            t = tensor_type(array)
            values.append(Value(name, t))
            graph_inputs.append(_value_info(name, t))
            feeds[name] = array
        inputs.append(
            None if value is None else tuple(values) if isinstance(value, tuple) else values[0]
        )
    typed_inputs = [
        None if v is None else tuple(x.type for x in v) if isinstance(v, tuple) else v.type
        for v in inputs
    ]
    b.outputs = infer_values(op, typed_inputs, attrs)
    result = EMITTERS[op.op_type](b, *inputs, attrs)
    names: list[str] = []
    for item in result if isinstance(result, list) else [result]:
        names.extend(item if isinstance(item, tuple) else (item,))
    flat_types: list[TensorType] = []
    for t in b.outputs:
        flat_types.extend(t if isinstance(t, tuple) else (t,))
    outputs = []
    for i, (name, t) in enumerate(zip(names, flat_types, strict=True)):
        out = f"out_{i}"
        b.nodes.append(helper.make_node("Identity", [name], [out]))
        outputs.append(_value_info(out, t))
    graph = helper.make_graph(b.nodes, op.op_type, graph_inputs, outputs, b.initializers)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", ONNX_OPSET)], ir_version=IR_VERSION
    )
    gate.check(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [np.asarray(v) for v in session.run(None, feeds)]
