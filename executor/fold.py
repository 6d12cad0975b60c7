"""Constant folding: the main graph's nodes that read only constants become initializers.

Programs saved from dygraph code compute some tensors from their parameters alone on every run:
LeViT's attention biases are one gather per position, each with its range guard, over a
parameter and a buffer (9,949 ONNX nodes, 8,171 of them such). onnxruntime folds them when a
session starts, but at a cost (seconds for LeViT, at every compile and every worker's load),
and the stored ONNX carries them all. Here the constant subgraph of cheap ops (FOLDABLE_OPS) is
evaluated once, by ONNX's reference implementation, and only the values the rest of the graph
reads are kept, as initializers under their own names.

What is never folded: a node with a subgraph (If, Loop) or whose output is a graph output, and
anything when the evaluation fails (a range guard refusing constant indices: every request then
fails at that node, as it did before) or when the values kept would take more than
MAX_FOLDED_BYTES (a constant broadcast to a large tensor is cheaper to compute than to store).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

# The bytes of folded values a model may gain; over it the model is left as lowered.
MAX_FOLDED_BYTES: Final = 64 * 1024 * 1024
# The ops folded: moving data, shape arithmetic, comparisons and exact elementwise math, which
# the reference implementation computes as onnxruntime does and at numpy's speed. Others
# (convolutions, matmuls, normalisations, transcendental functions) are left to onnxruntime,
# whose own folding at session start computes them with the kernels a request would use.
FOLDABLE_OPS: Final = frozenset(
    [
        "Abs", "Add", "And", "Cast", "Ceil", "Clip", "Concat", "Constant", "ConstantOfShape",
        "Div", "Equal", "Expand", "Flatten", "Floor", "Gather", "GatherElements", "GatherND",
        "Greater", "GreaterOrEqual", "Identity", "Less", "LessOrEqual", "Max", "Min", "Mod",
        "Mul", "Neg", "Not", "Or", "Range", "ReduceMax", "ReduceMin", "ReduceProd", "Reshape",
        "Shape", "Sign", "Size", "Slice", "Split", "Squeeze", "Sub", "Tile", "Transpose",
        "Unsqueeze", "Where", "Xor",
    ]
)  # fmt: skip


def fold_constants(model: onnx.ModelProto) -> int:
    """Folds, in place, the main graph's constant subgraph; returns how many nodes it removed."""
    graph = model.graph
    folded = _constant_nodes(graph)
    if not folded:
        return 0
    kept = [node for i, node in enumerate(graph.node) if i not in folded]
    needed = _frontier([graph.node[i] for i in folded], kept, graph.output)
    values = _evaluate(model, [graph.node[i] for i in sorted(folded)], needed) if needed else {}
    if values is None or sum(v.nbytes for v in values.values()) > MAX_FOLDED_BYTES:
        return 0
    del graph.node[:]
    graph.node.extend(kept)
    # The initializers only folded nodes read stay: the caller prunes what nothing reads.
    graph.initializer.extend(numpy_helper.from_array(v, name) for name, v in values.items())
    return len(folded)


def _constant_nodes(graph: onnx.GraphProto) -> set[int]:
    """Indices of the nodes whose inputs are all constants (initializers, or outputs of such
    nodes), in graph order (nodes are in topological order)."""
    constant = {t.name for t in graph.initializer}
    outputs = {info.name for info in graph.output}
    found: set[int] = set()
    for i, node in enumerate(graph.node):
        if node.op_type not in FOLDABLE_OPS or outputs.intersection(node.output):
            continue
        if all(name in constant for name in node.input if name):
            found.add(i)
            constant.update(node.output)
    return found


def _frontier(
    folded: Iterable[onnx.NodeProto],
    kept: Iterable[onnx.NodeProto],
    outputs: Iterable[onnx.ValueInfoProto],
) -> list[str]:
    """The folded values the rest of the graph reads (subgraphs' reads of outer values too)."""
    produced = {name for node in folded for name in node.output}
    read = {info.name for info in outputs}
    for node in kept:
        read.update(reads(node))
    return sorted(produced & read)


def reads(node: onnx.NodeProto) -> set[str]:
    """Every name the node reads, its subgraphs' reads of enclosing values included."""
    names = set(node.input)
    for attr in node.attribute:
        for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
            names.update(info.name for info in sub.output)
            for inner in sub.node:
                names.update(reads(inner))
    return names


def _evaluate(
    model: onnx.ModelProto, nodes: list[onnx.NodeProto], wanted: list[str]
) -> dict[str, np.ndarray] | None:
    """The `wanted` values of the constant subgraph `nodes`, computed once by ONNX's reference
    implementation; None if any node fails (or the evaluator cannot run it)."""
    reads = {name for node in nodes for name in node.input}
    initializers = [t for t in model.graph.initializer if t.name in reads]
    outputs = [helper.make_empty_tensor_value_info(name) for name in wanted]
    graph = helper.make_graph(nodes, "constants", [], outputs, initializers)
    sub = helper.make_model(graph, opset_imports=model.opset_import, ir_version=model.ir_version)
    try:
        with np.errstate(all="ignore"):
            results = ReferenceEvaluator(sub).run(wanted, {})
    except Exception:  # any failure leaves the model as lowered
        return None
    return {name: np.asarray(value) for name, value in zip(wanted, results, strict=True)}
