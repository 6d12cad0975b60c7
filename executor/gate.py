"""The ONNX gate: an allowlist on the produced ModelProto, independent of the Paddle allowlist.

Converter bugs and upgrades must not widen what actually runs (threats.md 2.3): only the default
domain at our opset, only the ONNX ops our lowerings emit, no functions, no external or sparse
data, well-formed initializers, bounded loops, and onnx.checker's full check.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Final

import numpy as np
import onnx
from onnx import TensorProto

from executor.lower import ONNX_OPSET, Value
from validator import GraphError
from validator.diagnostics import Code

MAX_LOOP_TRIPS: Final = 1024
MAX_SUBGRAPH_DEPTH: Final = 8
MAX_MODEL_BYTES: Final = 2**31 - 1
# Every ONNX op some lowering may emit. Adding a lowering that needs another op means adding it here.
ALLOWED_ONNX_OPS: Final = frozenset(
    [
        "Abs",
        "Acos",
        "Add",
        "And",
        "ArgMax",
        "ArgMin",
        "AveragePool",
        "BatchNormalization",
        "Cast",
        "Ceil",
        "Clip",
        "Concat",
        "Constant",
        "ConstantOfShape",
        "Conv",
        "ConvTranspose",
        "Cos",
        "CumSum",
        "DepthToSpace",
        "Div",
        "Dropout",
        "Elu",
        "Equal",
        "Erf",
        "Exp",
        "Expand",
        "Flatten",
        "Floor",
        "Gather",
        "GatherElements",
        "GatherND",
        "Gemm",
        "GlobalAveragePool",
        "GlobalMaxPool",
        "Greater",
        "GreaterOrEqual",
        "GRU",
        "HardSigmoid",
        "HardSwish",
        "Identity",
        "If",
        "InstanceNormalization",
        "LayerNormalization",
        "LeakyRelu",
        "Less",
        "LessOrEqual",
        "Log",
        "LogSoftmax",
        "Loop",
        "LpNormalization",
        "LSTM",
        "MatMul",
        "Max",
        "MaxPool",
        "Mean",
        "Min",
        "Mod",
        "Mul",
        "Neg",
        "NonMaxSuppression",
        "NonZero",
        "Not",
        "OneHot",
        "Or",
        "Pad",
        "Pow",
        "PRelu",
        "Range",
        "Reciprocal",
        "ReduceL1",
        "ReduceL2",
        "ReduceLogSumExp",
        "ReduceMax",
        "ReduceMean",
        "ReduceMin",
        "ReduceProd",
        "ReduceSum",
        "ReduceSumSquare",
        "Relu",
        "Reshape",
        "Resize",
        "RNN",
        "ScatterElements",
        "ScatterND",
        "Selu",
        "Shape",
        "Sigmoid",
        "Sign",
        "Sin",
        "Size",
        "Slice",
        "Softmax",
        "Softplus",
        "Softsign",
        "SpaceToDepth",
        "Split",
        "Sqrt",
        "Squeeze",
        "Sub",
        "Sum",
        "Tanh",
        "Tile",
        "TopK",
        "Transpose",
        "Trilu",
        "Unsqueeze",
        "Where",
        "Xor",
    ]
)
_FORBIDDEN_MARKERS: Final = ("_ORT_MEM_ADDR_", "_ORT_NATIVE_ENDIAN_MEM_ADDR_")


class GateError(GraphError):
    """The produced ONNX model breaks a gate rule; it is never handed to onnxruntime."""

    code = Code.ONNX_GATE


def check(model: onnx.ModelProto) -> None:
    """Raises GateError when the model is outside what graphgate runs."""
    size = _approximate_bytes(model)
    if size > MAX_MODEL_BYTES:
        raise GateError(f"expected a model under 2 GiB, got about {size} bytes")
    imports = [(o.domain, o.version) for o in model.opset_import]
    if imports != [("", ONNX_OPSET)]:
        raise GateError(f"expected opset_import [('', {ONNX_OPSET})], got {imports}")
    if model.functions:
        raise GateError(f"expected no functions, got {len(model.functions)}")
    _check_graph(model.graph, depth=0, outer={})
    try:
        onnx.checker.check_model(structure_of(model), full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        raise GateError(f"onnx.checker rejected the lowered model: {e}") from None


_SMALL: Final = 64  # initializers up to this many elements keep their values (shape constants)


def structure_of(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with its large initializers (weights) turned into typed graph inputs.

    The checker and shape inference need each weight's type and dims, not its bytes; handing
    them 100 MB of ResNet50 weights costs a serialization per call. Small initializers keep
    their values, since shape inference reads them (Reshape targets, Slice bounds)."""
    graph = model.graph
    small = [t for t in graph.initializer if _elements(t) <= _SMALL]
    weights = [
        onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
        for t in graph.initializer
        if _elements(t) > _SMALL
    ]
    light = onnx.helper.make_graph(
        list(graph.node), graph.name, [*graph.input, *weights], list(graph.output), small,
        value_info=list(graph.value_info),
    )  # fmt: skip
    return onnx.helper.make_model(
        light, opset_imports=list(model.opset_import), ir_version=model.ir_version
    )


def _approximate_bytes(model: onnx.ModelProto) -> int:
    """The serialized size within a few bytes per weight; ByteSize() would serialize it all."""
    weights = sum(len(t.raw_data) for t in model.graph.initializer if _elements(t) > _SMALL)
    return weights + structure_of(model).ByteSize()


def _elements(tensor: onnx.TensorProto) -> int:
    return int(np.prod(tensor.dims, dtype=np.int64))


def _check_graph(graph: onnx.GraphProto, depth: int, outer: Mapping[str, onnx.TensorProto]) -> None:
    """`outer`: the initializers of the enclosing graphs, which a subgraph sees by name."""
    if depth > MAX_SUBGRAPH_DEPTH:
        raise GateError(f"expected If/Loop nesting <= {MAX_SUBGRAPH_DEPTH}, got deeper")
    if graph.sparse_initializer:
        raise GateError("expected no sparse initializers")
    # NOTE: a name a subgraph produces itself hides the outer constant of that name.
    produced = {name for node in graph.node for name in node.output} | {i.name for i in graph.input}
    constants = {n: t for n, t in outer.items() if n not in produced}
    constants.update({t.name: t for t in graph.initializer})
    for tensor in graph.initializer:
        _check_tensor(tensor)
    for node in graph.node:
        _check_node(node, constants)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR:
                _check_tensor(attr.t)
            for sub in _subgraphs(attr):
                _check_graph(sub, depth + 1, constants)


def _check_node(node: onnx.NodeProto, constants: Mapping[str, onnx.TensorProto]) -> None:
    if node.domain not in ("", "ai.onnx"):
        raise GateError(f"node {node.name!r}: expected the default domain, got {node.domain!r}")
    if node.op_type not in ALLOWED_ONNX_OPS:
        raise GateError(
            f"node {node.name!r}: ONNX op {node.op_type!r} is not in the gate's allowlist"
        )
    if node.op_type == "Loop":
        trips = constants.get(node.input[0]) if node.input and node.input[0] else None
        if trips is None:
            raise GateError(f"node {node.name!r}: expected a Loop with a constant trip count M")
        count = int(onnx.numpy_helper.to_array(trips).reshape(-1)[0])
        if not 0 <= count <= MAX_LOOP_TRIPS:
            raise GateError(
                f"node {node.name!r}: expected a trip count in [0, {MAX_LOOP_TRIPS}], got {count}"
            )


def _check_tensor(tensor: onnx.TensorProto) -> None:
    if tensor.data_location == TensorProto.EXTERNAL or tensor.external_data:
        raise GateError(f"tensor {tensor.name!r}: expected inline data, got external data")
    if tensor.data_type in (TensorProto.STRING, TensorProto.UNDEFINED):
        raise GateError(
            f"tensor {tensor.name!r}: expected a numeric tensor, got type {tensor.data_type}"
        )
    if any(marker in tensor.name for marker in _FORBIDDEN_MARKERS):
        raise GateError(f"tensor {tensor.name!r}: names an onnxruntime memory address")
    if any(d < 0 for d in tensor.dims):
        raise GateError(f"tensor {tensor.name!r}: expected dims >= 0, got {list(tensor.dims)}")
    if tensor.HasField("raw_data"):
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
        expected = int(np.prod(tensor.dims, dtype=np.int64)) * itemsize
        if len(tensor.raw_data) != expected:
            raise GateError(
                f"tensor {tensor.name!r}: expected {expected} raw bytes, got {len(tensor.raw_data)}"
            )


def _subgraphs(attr: onnx.AttributeProto) -> Iterator[onnx.GraphProto]:
    if attr.type == onnx.AttributeProto.GRAPH:
        yield attr.g
    yield from attr.graphs


def cross_check_shapes(model: onnx.ModelProto, values: Mapping[str, Value]) -> list[str]:
    """Where ONNX shape inference and the validator both know a dim, they must agree.

    Returns the disagreements (each one is a bug in a rule or a lowering)."""
    inferred = onnx.shape_inference.infer_shapes(structure_of(model), strict_mode=True)
    known: dict[str, list[int | None]] = {}
    for info in [*inferred.graph.value_info, *inferred.graph.output, *inferred.graph.input]:
        if info.type.HasField("tensor_type") and info.type.tensor_type.HasField("shape"):
            dims = info.type.tensor_type.shape.dim
            known[info.name] = [d.dim_value if d.HasField("dim_value") else None for d in dims]
    problems = []
    for paddle_name, value in values.items():
        onnx_dims = known.get(value.name)
        if onnx_dims is None:
            continue
        ours = list(value.shape)
        agree = len(onnx_dims) == len(ours) and all(
            o is None or p < 0 or o == p for o, p in zip(onnx_dims, ours, strict=True)
        )
        if not agree:
            problems.append(f"{paddle_name}: validator {ours}, onnx {onnx_dims}")
    return problems
