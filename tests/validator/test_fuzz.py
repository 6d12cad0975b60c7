"""Property: whatever bytes arrive, validate() returns a ValidatedProgram or raises
ValidationFailed whose diagnostics all carry a Code; no other exception type, ever.

Byte-level mutations (flip, insert, delete, truncate, splice) of valid .pdmodel and .pdiparams
files, and field-level mutations of a parsed ProgramDesc (which get past the parser and reach the
structure checks, the op rules and the budgets). Derandomized and bounded, so CI is repeatable;
GRAPHGATE_FUZZ_EXAMPLES=N runs N random (not derandomized) examples per test, for a longer local run.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import Any, Final

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graph_proto import framework_pb2 as pb
from tests.support.builders import Built, affine, conv, mlp
from validator import Code, Policy, ValidatedProgram, ValidationFailed, validate
from validator.ops import REGISTRY

EXAMPLES: Final = int(os.environ.get("GRAPHGATE_FUZZ_EXAMPLES", "800"))
FUZZ = settings(
    max_examples=EXAMPLES,
    derandomize="GRAPHGATE_FUZZ_EXAMPLES" not in os.environ,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
BASES: Final[dict[str, Built]] = {f.__name__: f().built() for f in (affine, mlp, conv)}
SMALL_POLICY: Final = Policy(max_blocks=4, max_ops=20, max_feeds=4, max_dim=10**6)


def check(program: bytes, params: bytes | None, policy: Policy | None = None) -> None:
    """The property itself."""
    try:
        result = validate(program, params) if policy is None else validate(program, params, policy)
    except ValidationFailed as e:
        assert e.diagnostics
        assert all(isinstance(d.code, Code) and isinstance(d.message, str) for d in e.diagnostics)
        assert all(str(d) for d in e.diagnostics)
    else:
        assert isinstance(result, ValidatedProgram)


# -- byte mutations ------------------------------------------------------------------------------

POSITION = st.integers(0, 1 << 16)
MUTATION = st.one_of(
    st.tuples(st.just("flip"), POSITION, st.integers(0, 7)),
    st.tuples(st.just("insert"), POSITION, st.binary(min_size=1, max_size=16)),
    st.tuples(st.just("delete"), POSITION, st.integers(1, 32)),
    st.tuples(st.just("truncate"), POSITION),
    st.tuples(st.just("splice"), POSITION, POSITION, st.integers(1, 64), st.booleans()),
)


def mutate(data: bytes, mutations: Sequence[tuple[Any, ...]], other: bytes) -> bytes:
    """Applies each mutation at its position modulo the current length."""
    out = bytearray(data)
    for kind, at, *args in mutations:
        at %= len(out) + 1
        if kind == "flip" and at < len(out):
            out[at] ^= 1 << args[0]
        elif kind == "insert":
            out[at:at] = args[0]
        elif kind == "delete":
            del out[at : at + args[0]]
        elif kind == "truncate":
            del out[at:]
        elif kind == "splice":  # a chunk of this file, or of the other one, copied in
            start, size, foreign = args
            source = other if foreign else bytes(out)
            start %= len(source) + 1
            out[at:at] = source[start : start + size]
    return bytes(out)


MUTATIONS = st.lists(MUTATION, min_size=1, max_size=6)
BASE = st.sampled_from(sorted(BASES))


@FUZZ
@given(BASE, MUTATIONS)
def test_mutated_program_bytes(base: str, mutations: list[tuple[Any, ...]]) -> None:
    built = BASES[base]
    assert built.params is not None
    check(mutate(built.program, mutations, built.params), built.params)


@FUZZ
@given(BASE, MUTATIONS)
def test_mutated_params_bytes(base: str, mutations: list[tuple[Any, ...]]) -> None:
    built = BASES[base]
    assert built.params is not None
    check(built.program, mutate(built.params, mutations, built.program))


@FUZZ
@given(BASE, MUTATIONS, MUTATIONS, st.booleans())
def test_mutated_program_and_params_bytes(
    base: str,
    program_edits: list[tuple[Any, ...]],
    params_edits: list[tuple[Any, ...]],
    small: bool,
) -> None:
    built = BASES[base]
    assert built.params is not None
    program = mutate(built.program, program_edits, built.params)
    check(
        program, mutate(built.params, params_edits, built.program), SMALL_POLICY if small else None
    )


# -- field mutations of a parsed ProgramDesc -----------------------------------------------------

INTS = st.sampled_from([0, 1, -1, 2, 3, -2, 7, 13, 99, 2**31 - 1, -(2**31)])
LONGS = INTS | st.sampled_from([2**40, 2**62, 2**63 - 1, -(2**63)])
FLOATS = st.sampled_from([0.0, -1.0, 0.5, 3e38, -3e38, math.inf, -math.inf, math.nan])
NAMES = st.sampled_from(
    ["x", "image", "xs", "y", "feed", "fetch", "ghost", "y@GRAD", "", "X", "Out"]
)
SLOTS = st.sampled_from(["X", "Y", "Out", "Input", "Filter", "Output", "XShape", "Z", "Bias"])
OP_TYPES = st.sampled_from(
    [*sorted(REGISTRY.names()), "while", "conditional_block", "relu_grad", "sgd", "save", "zz"]
)
ATTR_NAMES = st.sampled_from(
    ["col", "axis", "sub_block", "strides", "paddings", "ksize", "groups", "dilations", "evil"]
)
VARTYPES = st.sampled_from([v for v in pb.VarType.Type.values() if v != 16])
ATTR_TYPES = st.sampled_from(list(pb.AttrType.values()))
SCALAR_TYPES = st.sampled_from(list(pb.Scalar.Type.values()))

Draw = Callable[[st.SearchStrategy[Any]], Any]


def _pick(draw: Draw, items: Sequence[Any]) -> Any:
    return items[draw(st.integers(0, len(items) - 1))] if items else None


def _vars(p: pb.ProgramDesc) -> list[pb.VarDesc]:
    return [v for b in p.blocks for v in b.vars]


def _ops(p: pb.ProgramDesc) -> list[pb.OpDesc]:
    return [op for b in p.blocks for op in b.ops]


def _edit_var(p: pb.ProgramDesc, draw: Draw) -> None:
    var = _pick(draw, _vars(p))
    if var is None:
        return
    tensor = var.type.dense_tensor.tensor
    field = draw(st.sampled_from(["dims", "dtype", "kind", "persistable", "name", "lod"]))
    if field == "dims":
        del tensor.dims[:]
        tensor.dims.extend(draw(st.lists(LONGS, max_size=5)))
    elif field == "dtype":
        tensor.data_type = draw(VARTYPES)
    elif field == "kind":
        var.type.type = draw(VARTYPES)
    elif field == "persistable":
        var.persistable = not var.persistable
    elif field == "name":
        var.name = draw(NAMES)
    else:
        var.type.dense_tensor.legacy_lod_level = draw(st.integers(0, 2))


def _edit_slot(p: pb.ProgramDesc, draw: Draw) -> None:
    op = _pick(draw, _ops(p))
    if op is None:
        return
    slots = list(op.inputs) + list(op.outputs)
    slot = _pick(draw, slots)
    action = draw(st.sampled_from(["rename", "argument", "append", "clear", "add"]))
    if action == "add" or slot is None:
        (op.inputs if draw(st.booleans()) else op.outputs).add(
            parameter=draw(SLOTS), arguments=[draw(NAMES)]
        )
    elif action == "rename":
        slot.parameter = draw(SLOTS)
    elif action == "argument" and slot.arguments:
        slot.arguments[0] = draw(NAMES)
    elif action == "append":
        slot.arguments.append(draw(NAMES))
    else:
        slot.ClearField("arguments")


def _edit_attr(p: pb.ProgramDesc, draw: Draw) -> None:
    op = _pick(draw, _ops(p))
    if op is None:
        return
    attr = _pick(draw, list(op.attrs)) if draw(st.booleans()) else None
    if attr is None:
        attr = op.attrs.add(name=draw(ATTR_NAMES))
    attr.type = draw(ATTR_TYPES)
    field = draw(st.sampled_from(["i", "l", "f", "s", "b", "block_idx", "ints", "longs",
                                  "floats", "strings", "bools", "scalar", "scalars"]))  # fmt: skip
    if field in {"i", "block_idx"}:
        setattr(attr, field, draw(INTS))
    elif field == "l":
        attr.l = draw(LONGS)
    elif field == "f":
        attr.f = draw(FLOATS)
    elif field == "s":
        attr.s = draw(NAMES)
    elif field == "b":
        attr.b = draw(st.booleans())
    elif field in {"ints", "longs", "floats", "strings", "bools"}:
        values = {"ints": INTS, "longs": LONGS, "floats": FLOATS, "strings": NAMES,
                  "bools": st.booleans()}[field]  # fmt: skip
        container = getattr(attr, field)
        del container[:]
        container.extend(draw(st.lists(values, max_size=6)))
    elif field == "scalar":
        attr.scalar.CopyFrom(_scalar(draw))
    else:
        attr.scalars.extend(_scalar(draw) for _ in range(draw(st.integers(0, 4))))


def _scalar(draw: Draw) -> pb.Scalar:
    scalar = pb.Scalar(type=draw(SCALAR_TYPES))
    scalar.i, scalar.r, scalar.b = draw(LONGS), draw(FLOATS), draw(st.booleans())
    return scalar


def _edit_op(p: pb.ProgramDesc, draw: Draw) -> None:
    block = _pick(draw, list(p.blocks))
    if block is None or not block.ops:
        return
    i, j = draw(st.integers(0, len(block.ops) - 1)), draw(st.integers(0, len(block.ops) - 1))
    action = draw(st.sampled_from(["type", "copy", "delete", "swap"]))
    if action == "type":
        block.ops[i].type = draw(OP_TYPES)
    elif action == "copy":
        block.ops.add().CopyFrom(block.ops[i])
    elif action == "delete":
        del block.ops[i]
    else:
        first, second = pb.OpDesc(), pb.OpDesc()
        first.CopyFrom(block.ops[i])
        second.CopyFrom(block.ops[j])
        block.ops[i].CopyFrom(second)
        block.ops[j].CopyFrom(first)


def _edit_blocks(p: pb.ProgramDesc, draw: Draw) -> None:
    action = draw(st.sampled_from(["add", "parent", "idx", "forward"]))
    if action == "add":
        block = p.blocks.add(idx=len(p.blocks), parent_idx=draw(st.integers(-1, len(p.blocks))))
        owner = _pick(draw, list(p.blocks))
        op = owner.ops.add(type=draw(st.sampled_from(["while", "conditional_block"])))
        op.attrs.add(name="sub_block", type=pb.BLOCK, block_idx=draw(INTS | st.just(block.idx)))
        return
    block = _pick(draw, list(p.blocks))
    if block is None:
        return
    if action == "parent":
        block.parent_idx = draw(INTS)
    elif action == "idx":
        block.idx = draw(INTS)
    else:
        block.forward_block_idx = draw(INTS)


EDITS: Final = (_edit_var, _edit_slot, _edit_attr, _edit_op, _edit_blocks)


@FUZZ
@given(BASE, st.data())
def test_mutated_program_fields(base: str, data: st.DataObject) -> None:
    built = BASES[base]
    program = pb.ProgramDesc.FromString(built.program)
    for edit in data.draw(st.lists(st.sampled_from(EDITS), min_size=1, max_size=4)):
        edit(program, data.draw)
    check(program.SerializePartialToString(), built.params)
