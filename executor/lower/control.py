"""ONNX lowering of validator/ops/control.py: conditional_block -> If, while -> Loop.

A block op's sub-block becomes an ONNX subgraph that reads the enclosing values by name (ONNX
outer-scope capture) and returns what the op's Out slot lists. Every Loop runs at most the
policy's bound + 1 iterations and reports whether it needed that extra one (and whether a loop
var grew past the byte cap): those flags leave the model as hidden outputs, and the session
raises a typed error when one is set, so a loop cut off never returns a truncated result.

A block-0 select_input whose branch values differ in type hands its Mask out the same way
(BRANCH_MASK_PREFIX + op index): the session re-infers with the branch that ran and checks the
fetches against exactly its dims. What the run does with these outputs is RuntimeChecks' (in
executor/runtime_checks.py); the types every op here uses are those the validator recorded on
it (BoundOp.types_in/out), a sub-block's under its owner's last pass. NOTE: a select_input inside a sub-block (a cond in a loop body
or in another branch) has no single value to hand out; its dims that differ stay checked only
where the branches agree.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Final

import numpy as np
import onnx
from onnx import TensorProto, helper

from executor.lower._builder import ONNX_DTYPE, OnnxBuilder, Value
from executor.runtime_checks import BRANCH_MASK_PREFIX
from graph_proto.types import DType
from validator import TensorType
from validator.bind import BoundOp
from validator.ops.control import BLOCK_OPS, CONDITIONAL_BLOCK_OP, IncrementAttrs
from validator.runtime import branches_differ

# What a loop reports when it had to stop: needing more iterations than the bound ("trips"),
# or a loop var growing past the tensor byte cap ("bytes"). Each kind is one boolean per graph.
FLAG_KINDS: Final = ("trips", "bytes")
Flags = dict[str, list[str]]  # kind -> boolean values raised

# Lowers a block's ops into the builder's current node list; returns the flags raised.
LowerOps = Callable[[OnnxBuilder, Sequence[BoundOp], dict[str, Value]], Flags]

__all__ = [
    "BLOCK_OPS",
    "BRANCH_MASK_PREFIX",
    "EMITTERS",
    "FLAG_KINDS",
    "Flags",
    "branch_mask_outputs",
    "lower_block_op",
    "merge_flags",
    "wanted_mask",
]


@contextmanager
def _subgraph_nodes(b: OnnxBuilder) -> Iterator[list[onnx.NodeProto]]:
    """Nodes made inside go to a fresh list (a subgraph); names stay unique model-wide, and
    constants stay initializers of the main graph, which subgraphs see by name."""
    outer, b.nodes = b.nodes, []
    try:
        yield b.nodes
    finally:
        b.nodes = outer


def _info(name: str, t: TensorType) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(
        name, ONNX_DTYPE[t.dtype], [d if d >= 0 else None for d in t.shape]
    )


def _scalar_info(name: str, elem: int) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, [])


def _any(b: OnnxBuilder, values: Sequence[str]) -> str:
    result = values[0]
    for value in values[1:]:
        result = b.op("Or", result, value)
    return result


def merge_flags(b: OnnxBuilder, flags: Flags) -> dict[str, str]:
    """One boolean per kind raised (in FLAG_KINDS order), true when any flag of it is."""
    return {kind: _any(b, flags[kind]) for kind in FLAG_KINDS if flags.get(kind)}


def lower_block_op(
    b: OnnxBuilder,
    op: BoundOp,
    env: Mapping[str, Value],
    lower_ops: LowerOps,
    limits: tuple[int | None, int],
) -> tuple[dict[str, Value], Flags]:
    """The values the op writes (its Out vars), and the flags it raises. `limits`: the policy's
    trip bound and tensor byte cap."""
    if op.op_type == CONDITIONAL_BLOCK_OP:
        return _conditional_block(b, op, env, lower_ops)
    max_trips, max_bytes = limits
    assert max_trips is not None, "the validator rejects loops under a policy without a bound"
    return _while(b, op, env, lower_ops, (max_trips, max_bytes))


def _conditional_block(
    b: OnnxBuilder,
    op: BoundOp,
    env: Mapping[str, Value],
    lower_ops: LowerOps,
) -> tuple[dict[str, Value], Flags]:
    (cond,) = op.inputs["Cond"]
    (body,) = op.blocks
    written = op.outputs.get("Out", ())
    inferred = op.types_out
    inner_env = dict(env)
    with _subgraph_nodes(b) as then_nodes:
        raised = merge_flags(b, lower_ops(b, body, inner_env))
        then_out = [b.op("Identity", inner_env[name].name) for name in written]
        then_out.extend(b.op("Identity", flag) for flag in raised.values())
    with _subgraph_nodes(b) as else_nodes:
        # NOTE: when the branch does not run, an Out var defined before keeps its value; one the
        # branch defines has none in Paddle either, and the validator lets only a select_input
        # on this very condition read it, so its empty stand-in is never picked.
        else_out = [
            b.op("Identity", env[name].name) if name in env else _placeholder(b, inferred[name])
            for name in written
        ]
        else_out.extend(b.op("Identity", b.const(np.asarray(False))) for _ in raised)
    if not then_out:
        return {}, {}  # a branch that writes nothing the program can read
    out_types = [inferred[name] for name in written]
    results = b.op_n(
        "If",
        env[cond].name,
        n_outputs=len(then_out),
        then_branch=_branch(b, then_nodes, then_out, out_types),
        else_branch=_branch(b, else_nodes, else_out, out_types),
    )
    produced = {name: Value(results[i], inferred[name]) for i, name in enumerate(written)}
    flags = results[len(written) :]
    return produced, {kind: [flag] for kind, flag in zip(raised, flags, strict=True)}


def _branch(
    b: OnnxBuilder, nodes: list[onnx.NodeProto], outputs: Sequence[str], types: Sequence[TensorType]
) -> onnx.GraphProto:
    # NOTE: rank only: the stand-ins of a branch not taken are empty, whatever the dims.
    infos = [
        helper.make_tensor_value_info(name, ONNX_DTYPE[t.dtype], [None] * t.rank)
        for name, t in zip(outputs, types, strict=False)
    ]
    infos.extend(_scalar_info(name, TensorProto.BOOL) for name in outputs[len(types) :])
    return helper.make_graph(nodes, b.fresh("branch"), [], infos)


def _placeholder(b: OnnxBuilder, t: TensorType) -> str:
    """An empty tensor of t's dtype and rank (one element for rank 0)."""
    empty = b.const(np.zeros((0,) * t.rank, np.float32), hint="unset")
    return b.cast(empty, t.dtype)


def _while(
    b: OnnxBuilder,
    op: BoundOp,
    env: Mapping[str, Value],
    lower_ops: LowerOps,
    limits: tuple[int, int],
) -> tuple[dict[str, Value], Flags]:
    """Loop with M = bound + 1 and, carried along, the trip count: the Loop ran past the bound
    exactly when that count exceeds it. A loop var with dims unknown at compile time is
    measured after each iteration; past the byte cap the loop stops and raises "bytes", since no
    static budget bounds what it grows to (concat doubling it 1000 times)."""
    max_trips, max_bytes = limits
    (cond,) = op.inputs["Condition"]
    (body,) = op.blocks
    carried = op.outputs["Out"]
    inferred = op.types_out  # the loop-carried types: what every iteration starts from
    # NOTE: a dim unknown before the loop may grow too (concat along the batch dim).
    growing = [name for name in carried if not inferred[name].known]
    iteration, cond_in, trips_in = b.fresh("iteration"), b.fresh("cond_in"), b.fresh("trips_in")
    carried_in = {name: b.fresh("loop_in") for name in carried}
    inner_env = dict(env)
    inner_env.update({name: Value(carried_in[name], inferred[name]) for name in carried})
    with _subgraph_nodes(b) as nodes:
        flags = lower_ops(b, body, inner_env)
        if growing:
            sizes = [_too_large(b, inner_env[name], max_bytes) for name in growing]
            flags.setdefault("bytes", []).extend(sizes)
        raised = merge_flags(b, flags)
        seen_in = {kind: b.fresh(f"{kind}_in") for kind in raised}
        seen_out = [b.op("Or", seen_in[kind], flag) for kind, flag in raised.items()]
        keep_going = b.op("Reshape", inner_env[cond].name, b.ints([]))
        if raised:
            keep_going = b.op("And", keep_going, b.op("Not", _any(b, list(raised.values()))))
        body_out = [keep_going, b.op("Add", trips_in, b.const(np.asarray(1, np.int64)))]
        body_out.extend(seen_out)
        body_out.extend(b.op("Identity", inner_env[name].name) for name in carried)
    scalars = [TensorProto.BOOL, TensorProto.INT64] + [TensorProto.BOOL] * len(raised)
    graph_in = [
        _scalar_info(iteration, TensorProto.INT64),
        _scalar_info(cond_in, TensorProto.BOOL),
        _scalar_info(trips_in, TensorProto.INT64),
        *(_scalar_info(name, TensorProto.BOOL) for name in seen_in.values()),
        *(_info(carried_in[name], inferred[name]) for name in carried),
    ]
    graph_out = [_scalar_info(name, elem) for name, elem in zip(body_out, scalars, strict=False)]
    graph_out.extend(
        _info(name, inferred[var])
        for name, var in zip(body_out[len(scalars) :], carried, strict=True)
    )
    loop_graph = helper.make_graph(nodes, b.fresh("loop_body"), graph_in, graph_out)
    initial = [
        b.const(np.asarray(max_trips + 1, np.int64), hint="max_trips"),
        b.op("Reshape", env[cond].name, b.ints([])),
        b.const(np.asarray(0, np.int64)),
        *(b.const(np.asarray(False)) for _ in raised),
        *(env[name].name for name in carried),
    ]
    results = b.op_n("Loop", *initial, n_outputs=len(body_out) - 1, body=loop_graph)
    trips, seen, finals = results[0], results[1 : 1 + len(raised)], results[1 + len(raised) :]
    out: Flags = {kind: [flag] for kind, flag in zip(raised, seen, strict=True)}
    out.setdefault("trips", []).append(
        b.op("Greater", trips, b.const(np.asarray(max_trips, np.int64)))
    )
    produced = {name: Value(finals[i], inferred[name]) for i, name in enumerate(carried)}
    return produced, out


def _too_large(b: OnnxBuilder, value: Value, max_bytes: int) -> str:
    """True when the value holds more than max_bytes."""
    limit = max_bytes // value.dtype.itemsize
    return b.op("Greater", b.op("Size", value.name), b.const(np.asarray(limit, np.int64)))


def _select_input(b: OnnxBuilder, xs: tuple[Value, ...], mask: Value, _a: object) -> str:
    """If(Mask) X[1] else X[0]; the validator makes sure Mask is a cast boolean (0 or 1)."""
    t = b.out()
    picked = []
    for value in (xs[1], xs[0]):
        with _subgraph_nodes(b) as nodes:
            out = b.op("Identity", value.name)
        picked.append(helper.make_graph(nodes, b.fresh("select"), [], [_info(out, t)]))
    return b.op("If", b.cast(mask.name, DType.BOOL), then_branch=picked[0], else_branch=picked[1])


def wanted_mask(op: BoundOp, env: Mapping[str, Value]) -> tuple[int, Value] | None:
    """(op index, Mask value) of a block-0 select_input whose branch values differ in type, to
    hand out; call before the op's Out enters env (the Mask may be rewritten later)."""
    if op.block != 0 or not branches_differ(op):
        return None
    return op.index, env[op.inputs["Mask"][0]]


def branch_mask_outputs(
    b: OnnxBuilder, masks: Sequence[tuple[int, Value]]
) -> list[onnx.ValueInfoProto]:
    """One hidden graph output per wanted Mask, named after its select_input's op index."""
    infos = []
    for index, mask in masks:
        name = f"{BRANCH_MASK_PREFIX}{index}"
        b.nodes.append(helper.make_node("Identity", [mask.name], [name], name=name))
        infos.append(_info(name, mask.type))
    return infos


def _increment(b: OnnxBuilder, x: Value, a: IncrementAttrs) -> str:
    # NOTE: the kernel adds static_cast<T>(step): integers truncate toward zero, as int() does.
    step = a.step if x.dtype in (DType.FP32, DType.FP64) else int(a.step)
    return b.op("Add", x.name, b.scalar(step, x.dtype))


EMITTERS: Final = {"select_input": _select_input, "increment": _increment}
