"""Every declared case of every registered op, lowered to ONNX and run by onnxruntime, equals
its numpy reference; never edited when an op is added."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

from executor import gate
from executor.lower import (
    BOUNDARY_OPS,
    EMITTERS,
    IR_VERSION,
    ONNX_DTYPE,
    ONNX_OPSET,
    OnnxBuilder,
    Value,
)
from tests.ops.cases import decoded_attrs, reference_outputs, tensor_type
from validator.infer import infer_values
from validator.ops import REGISTRY, Case, OpDef, TensorType

RUNNABLE = [
    pytest.param(op, case, id=f"{op.op_type}-{i}")
    for op in REGISTRY
    if op.op_type not in BOUNDARY_OPS
    for i, case in enumerate(op.cases)
    if case.expect is not None
]


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


@pytest.mark.parametrize(("op", "case"), RUNNABLE)
def test_lowered_op_matches_the_numpy_reference(op: OpDef, case: Case) -> None:
    expected = reference_outputs(op, case)
    got = run_lowered(op, case)
    assert [g.shape for g in got] == [e.shape for e in expected]
    assert [g.dtype for g in got] == [e.dtype for e in expected]
    for g, e in zip(got, expected, strict=True):
        if np.issubdtype(e.dtype, np.floating):
            np.testing.assert_allclose(g, e, rtol=case.rtol, atol=case.atol)
        else:
            np.testing.assert_array_equal(g, e)


def test_every_registered_op_has_exactly_one_lowering() -> None:
    registered = {op.op_type for op in REGISTRY} - BOUNDARY_OPS
    assert (sorted(registered - EMITTERS.keys()), sorted(EMITTERS.keys() - registered)) == ([], [])
