"""lower(): a ValidatedProgram becomes a self-contained ONNX model (graph inputs/outputs by col).

Two forms: the serving form (Lowered.model, `lower(lean=True)`), which CompiledModel runs and
the server stores, hands graphgate's run-time checks hidden outputs after the fetches, and may
take values as non-empty where only an empty one would need run-time shape arithmetic (the
session answers or refuses a request that makes one empty: RuntimeChecks.nonempty); the
portable form (portable(), what `graphgate convert` writes) is never lean, has exactly the
fetches as outputs and states the loop bound policy in its metadata, for any ONNX runtime."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

import numpy as np
import onnx
from onnx import TensorProto, helper

from executor import gate
from executor.fold import fold_constants, reads
from executor.lower import (
    BOUNDARY_OPS,
    EMITTERS,
    IR_VERSION,
    ONNX_DTYPE,
    ONNX_OPSET,
    LoweringError,
    OnnxBuilder,
    Value,
    control,
)
from executor.runtime_checks import (
    LOOP_FLAG_OUTPUTS,
    RuntimeChecks,
    named_check,
    named_checks,
)
from graph_proto.types import INTEGERS
from validator import TensorType, ValidatedProgram
from validator.bind import BoundOp

# The loop bound policy, in a model with loops (metadata_props): every Loop runs at most
# max_loop_trips + 1 iterations, and stops early when a loop var grows past max_tensor_bytes.
MAX_LOOP_TRIPS_KEY: Final = "graphgate.max_loop_trips"
MAX_TENSOR_BYTES_KEY: Final = "graphgate.max_tensor_bytes"
LOOP_POLICY_KEY: Final = "graphgate.loop_policy"
# The serving form of a lean lowering (lower(lean=True)): the Paddle vars its reshapes take as
# non-empty, comma-separated. Where one is empty, Paddle's reshape makes a size of each 0 it
# would copy (another empty shape than this graph's); graphgate's session answers such a
# request without running this graph (or refuses it), another runtime would not.
NONEMPTY_KEY: Final = "graphgate.nonempty"
_LOOP_POLICY: Final = (
    "every Loop runs at most graphgate.max_loop_trips + 1 iterations and stops early when a loop "
    "var grows past graphgate.max_tensor_bytes; graphgate refuses a request whose loop needed "
    "more (LOOP_TRIP_LIMIT, TENSOR_TOO_LARGE), whereas another runtime returns what the loop "
    "held when it stopped"
)


@dataclass(frozen=True, slots=True)
class Lowered:
    """The serving form of the ONNX model (the fetches, then checks.hidden_outputs), which ONNX
    value holds each Paddle variable (for the shape cross-check), and the run-time checks."""

    model: onnx.ModelProto
    values: Mapping[str, Value]
    checks: RuntimeChecks


# Nodes that cannot fail on what the validator lets through (shapes, casts of them, views):
# dropped when nothing reads them.
UNREAD_DROPPABLE: Final = frozenset(
    {"Shape", "Size", "Cast", "Slice", "Squeeze", "Unsqueeze", "Concat", "Identity"}
)


def lower(program: ValidatedProgram, *, lean: bool = False) -> Lowered:
    """`lean`: lowerings may take values of the main graph as non-empty where only an empty
    one would need run-time shape arithmetic (OnnxBuilder.assume_nonempty): the serving form
    of a program whose shapes the feeds' shapes decide, whose session checks every request's
    shapes against them (checks.nonempty). The portable form is never lean."""
    lean = lean and not program.report.data_dependent
    b = OnnxBuilder()
    b.lean = lean
    b.feeds = {spec.name: len(spec.dims) for spec in program.inputs}
    b.params = program.params
    b.integer_params = frozenset(n for n in program.params if program.types[n].dtype in INTEGERS)
    env: dict[str, Value] = {}
    for spec in program.inputs:
        env[spec.name] = Value(spec.name, TensorType(spec.dtype, spec.dims))
    for name in program.params:
        env[name] = Value(name, program.types[name])
    inputs = [_value_info(spec.name, env[spec.name].type, symbolic=True) for spec in program.inputs]
    limits = (program.policy.max_loop_trips, program.policy.max_tensor_bytes)
    masks: list[tuple[int, Value]] = []
    flags = control.merge_flags(b, _lower_ops(b, program.ops, env, limits, masks))
    outputs = _outputs(b, program, env)
    for kind, flag in flags.items():
        name = LOOP_FLAG_OUTPUTS[kind]
        b.nodes.append(helper.make_node("Identity", [flag], [name], name=name))
        outputs.append(helper.make_tensor_value_info(name, TensorProto.BOOL, []))
    outputs.extend(control.branch_mask_outputs(b, masks))
    graph = helper.make_graph(b.nodes, "graphgate", inputs, outputs)
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", ONNX_OPSET)],
        ir_version=IR_VERSION,
        producer_name="graphgate",
    )
    # The parameters straight into the model's own graph: make_graph and make_model each copy
    # every initializer (two copies of ResNet50's 100 MB, ~0.25 s of an upload's compile).
    for name, array in program.params.items():
        _add_initializer(model.graph, name, array, program.types[name])
    model.graph.initializer.extend(b.initializers)
    fold_constants(model)
    _drop_unread_shape_arithmetic(model.graph)
    _prune_initializers(model.graph)
    paddle_names = {v.name: p for p, v in env.items()}
    nonempty = tuple(dict.fromkeys(paddle_names.get(name, "") for name in b.nonempty))
    if "" in nonempty:  # taken as non-empty, but not a Paddle var the session can check
        return lower(program)
    props = _loop_policy(program) if flags else {}  # every while raises a "trips" flag
    if nonempty:
        props[NONEMPTY_KEY] = ",".join(nonempty)
    if props:
        helper.set_model_props(model, props)
    checks = RuntimeChecks(
        hidden_outputs=tuple(info.name for info in outputs[len(program.outputs) :]),
        host_checks=tuple(b.host_checks),
        shape_checks=tuple(
            replace(shaped, check=named_check(shaped.check, paddle_names))
            for shaped in b.shape_checks
        ),
        index_checks=named_checks(b.index_checks, paddle_names),
        nonempty=nonempty,
        max_loop_trips=program.policy.max_loop_trips,
        max_tensor_bytes=program.policy.max_tensor_bytes,
    )
    return Lowered(model, env, checks)


def export(program: ValidatedProgram) -> onnx.ModelProto:
    """What `graphgate convert` writes: the portable form of the lowered model, gated."""
    model = portable(lower(program))
    gate.check(model)
    return model


def portable(lowered: Lowered) -> onnx.ModelProto:
    """The model any ONNX runtime can run as is: exactly the fetches as outputs (the hidden ones
    only graphgate's session reads are dropped, with the nodes that computed nothing else), no
    unused initializers, and the loop bound policy in metadata_props (kept from the serving
    form)."""
    model = onnx.ModelProto()
    model.CopyFrom(lowered.model)
    graph = model.graph
    hidden = set(lowered.checks.hidden_outputs)
    if not hidden:
        return model
    kept = [info for info in graph.output if info.name not in hidden]
    del graph.output[:]
    graph.output.extend(kept)
    live = _live_nodes(graph)
    del graph.node[:]
    graph.node.extend(live)
    _prune_initializers(graph)
    return model


def _loop_policy(program: ValidatedProgram) -> dict[str, str]:
    return {
        MAX_LOOP_TRIPS_KEY: str(program.policy.max_loop_trips),
        MAX_TENSOR_BYTES_KEY: str(program.policy.max_tensor_bytes),
        LOOP_POLICY_KEY: _LOOP_POLICY,
    }


def _live_nodes(
    graph: onnx.GraphProto, droppable: frozenset[str] | None = None
) -> list[onnx.NodeProto]:
    """The main graph's nodes some output depends on, in order: a node whose outputs nothing
    reads is dropped if its op type is `droppable` (None: any, every node being pure)."""
    wanted = {info.name for info in graph.output}
    live: list[onnx.NodeProto] = []
    for node in reversed(graph.node):
        unread = not wanted.intersection(node.output)
        if unread and (droppable is None or node.op_type in droppable):
            continue
        live.append(node)
        wanted.update(reads(node))
    return live[::-1]


def _drop_unread_shape_arithmetic(graph: onnx.GraphProto) -> None:
    """Drops the nodes of UNREAD_DROPPABLE whose outputs nothing reads: a `shape` and `slice`
    whose size a later lowering took from X itself (reshape's own dims) or from the validator
    (a known resize) are left computing for nobody, and onnxruntime runs them. Other unread
    nodes stay: one that can fail (a range guard, a gather) fails the request as Paddle would."""
    live = _live_nodes(graph, UNREAD_DROPPABLE)
    if len(live) != len(graph.node):
        del graph.node[:]
        graph.node.extend(live)


def _prune_initializers(graph: onnx.GraphProto) -> None:
    """Drops the initializers no node reads (onnxruntime warns about each it removes)."""
    used = {info.name for info in graph.output}
    for node in graph.node:
        used.update(reads(node))
    kept = [t for t in graph.initializer if t.name in used]
    if len(kept) != len(graph.initializer):
        del graph.initializer[:]
        graph.initializer.extend(kept)


def _lower_ops(
    b: OnnxBuilder,
    ops: Sequence[BoundOp],
    env: dict[str, Value],
    limits: tuple[int | None, int],
    masks: list[tuple[int, Value]] | None = None,
) -> control.Flags:
    """Lowers ops in order (a block's, or block 0's) into the builder's current node list, with
    the types the validator recorded on each; returns the loop flags raised on the way. `masks`
    (block 0): collects the select_input Masks the session needs to check outputs against the
    branch that ran."""

    def lower_block(b: OnnxBuilder, ops: Sequence[BoundOp], env: dict[str, Value]) -> control.Flags:
        return _lower_ops(b, ops, env, limits)

    flags: control.Flags = {}
    for op in ops:
        if op.op_type in BOUNDARY_OPS and op.op_type not in control.BLOCK_OPS:
            continue
        try:
            if op.op_type in control.BLOCK_OPS:
                with b.naming(f"{op.block}_{op.index}_{op.op_type}"):
                    produced, raised = control.lower_block_op(b, op, env, lower_block, limits)
                for kind, raised_flags in raised.items():
                    flags.setdefault(kind, []).extend(raised_flags)
            else:
                if masks is not None and (mask := control.wanted_mask(op, env)):
                    masks.append(mask)
                produced = _lower_op(b, op, env)
        except LoweringError as e:
            if e.op_index is None:  # an op inside a sub-block was located already
                e.block, e.op_index, e.op_type = op.block, op.index, op.op_type
            raise
        env.update(produced)
    return flags


def _lower_op(b: OnnxBuilder, op: BoundOp, env: Mapping[str, Value]) -> dict[str, Value]:
    types = op.types_out
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


def _add_initializer(graph: onnx.GraphProto, name: str, array: np.ndarray, t: TensorType) -> None:
    """A parameter as raw little-endian bytes (numpy_helper.from_array's encoding), built in
    place: one copy of its bytes. numpy has no bfloat16: its raw uint16 words go in as they are.
    (The validator matched the array's dtype to `t`'s: validator/params.py.)"""
    tensor = graph.initializer.add()
    tensor.name = name
    tensor.dims.extend(array.shape)
    tensor.data_type = ONNX_DTYPE[t.dtype]
    tensor.raw_data = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()
