"""Structural checks before any op is interpreted: sizes, blocks, names, var kinds, feed/fetch."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

from graph_proto import framework_pb2 as pb
from graph_proto.types import DType, dtype_from_vartype
from validator.diagnostics import Code, Diagnostic
from validator.ops import TensorType
from validator.policy import GRAD_MARKER, Policy, forbidden_reason, is_training_op

VT = pb.VarType
_NAME: Final = re.compile(r"[A-Za-z0-9_.@/:\-]+")
_MAX_RANK: Final = 64
_ELEMENT_LIMIT: Final = 2**62  # numel * itemsize must stay far from int64 overflow
FEED_OP: Final = "feed"
FETCH_OP: Final = "fetch"
_HOLDERS: Final = {VT.FEED_MINIBATCH: "feed_holder", VT.FETCH_LIST: "fetch_holder"}


@dataclass
class Structure:
    """What the later stages need: declared vars, and the feed and fetch lists by col."""

    blocks: list[pb.BlockDesc] = field(default_factory=list)
    vars: list[dict[str, pb.VarDesc]] = field(default_factory=list)  # per block
    parents: list[int] = field(default_factory=list)  # parent_idx per block (-1 for block 0)
    step_scopes: set[str] = field(default_factory=set)  # Scope/StepScopes vars of block ops
    declared: dict[str, TensorType] = field(default_factory=dict)  # block-0 dense tensors
    feeds: dict[int, str] = field(default_factory=dict)
    fetches: dict[int, str] = field(default_factory=dict)
    persistable: list[str] = field(default_factory=list)  # sorted, as in .pdiparams
    feed_holder: str | None = None
    fetch_holder: str | None = None
    fatal: bool = False  # block structure too broken to interpret any op

    def lookup(self, block: int, name: str) -> tuple[int, pb.VarDesc] | None:
        """The VarDesc a name means in `block`: its own, or an enclosing block's (Paddle's
        FindVarRecursive), with the block that declares it."""
        at = block
        while at >= 0:
            var = self.vars[at].get(name)
            if var is not None:
                return at, var
            at = self.parents[at]
        return None


def check_structure(program: pb.ProgramDesc, policy: Policy, out: list[Diagnostic]) -> Structure:
    s = Structure(blocks=list(program.blocks))
    if not _check_sizes(program, policy, out):
        s.fatal = True
        return s
    if not _check_blocks(program, policy, out):
        s.fatal = True
        return s
    _check_sub_block_refs(program, out)
    _check_vars(program, policy, s, out)
    _check_ops(program, out)
    _check_feed_fetch(program, policy, s, out)
    return s


def _check_sizes(program: pb.ProgramDesc, policy: Policy, out: list[Diagnostic]) -> bool:
    """Reports every count over its cap; False when the program is too big to check further.

    Over max_blocks alone the checks go on, so the report lists every other problem too: each
    check costs at most the ops and vars (capped) plus, per block, the nesting cap. Past one
    block per op (each sub-block belongs to an op) that per-block work would be unbounded."""
    # NOTE: each count is checked before anything iterates over what it counts.
    blocks = len(program.blocks)
    if blocks > policy.max_blocks:
        out.append(
            _d(
                Code.PROGRAM_TOO_COMPLEX,
                f"expected at most {policy.max_blocks} blocks, got {blocks}",
            )
        )
    if blocks > max(policy.max_blocks, policy.max_ops + 1):
        return False
    ops = sum(len(b.ops) for b in program.blocks)
    if ops > policy.max_ops:
        out.append(_d(Code.TOO_MANY_OPS, f"expected at most {policy.max_ops} ops, got {ops}"))
    var_count = sum(len(b.vars) for b in program.blocks)
    if var_count > policy.max_vars:
        out.append(
            _d(
                Code.PROGRAM_TOO_COMPLEX,
                f"expected at most {policy.max_vars} vars, got {var_count}",
            )
        )
    if ops > policy.max_ops or var_count > policy.max_vars:
        return False
    too_complex = len(out)
    small = min(policy.max_attr_items, policy.max_slot_args)
    for b, i, op in _all_ops(program):
        # Every list item and argument takes at least one byte: small ops need no counting.
        if len(op.attrs) <= policy.max_attrs_per_op and op.ByteSize() <= small:
            continue
        problem = _op_too_complex(op, policy)
        if problem is not None:
            out.append(_op(Code.PROGRAM_TOO_COMPLEX, b, i, op, problem))
    return len(out) == too_complex  # an op over its caps is a bomb: nothing reads it further


def _op_too_complex(op: pb.OpDesc, policy: Policy) -> str | None:
    if len(op.attrs) > policy.max_attrs_per_op:
        return f"expected at most {policy.max_attrs_per_op} attributes, got {len(op.attrs)}"
    for var in (*op.inputs, *op.outputs):
        if len(var.arguments) > policy.max_slot_args:
            return f"slot {var.parameter!r}: expected at most {policy.max_slot_args} variables, got {len(var.arguments)}"
    for attr in op.attrs:
        items = max(len(attr.ints), len(attr.longs), len(attr.floats), len(attr.strings),
                    len(attr.float64s), len(attr.bools), len(attr.scalars), len(attr.vars_name))  # fmt: skip
        if items > policy.max_attr_items:
            return f"attribute {attr.name!r}: expected at most {policy.max_attr_items} items, got {items}"
    return None


def _check_blocks(program: pb.ProgramDesc, policy: Policy, out: list[Diagnostic]) -> bool:
    """Block indices, parents, depth; False when too broken to go on."""
    count = len(program.blocks)
    if count == 0:
        out.append(_d(Code.BLOCK_INDEX, "expected at least one block, got 0"))
        return False
    ok = True
    for i, block in enumerate(program.blocks):
        expected_parent = "-1" if i == 0 else f"in [0, {count}) and != {i}"
        bad_parent = (
            block.parent_idx != -1
            if i == 0
            else not (0 <= block.parent_idx < count and block.parent_idx != i)
        )
        if block.idx != i or bad_parent:
            out.append(
                _d(
                    Code.BLOCK_INDEX,
                    f"expected idx {i} and parent_idx {expected_parent}, got idx {block.idx} and parent_idx {block.parent_idx}",
                    block=i,
                )
            )
            ok = False
        if block.forward_block_idx != -1:
            out.append(
                _d(
                    Code.TRAINING_PROGRAM,
                    f"expected forward_block_idx -1 (inference), got {block.forward_block_idx}",
                    block=i,
                )
            )
    if not ok:
        return False
    depths = {0: 0}  # NOTE: memoized, so that a long chain of blocks costs linear work
    for i in range(1, count):
        chain: dict[int, None] = {}  # ordered, with set lookups
        at = i
        while at not in depths:
            if at in chain:
                out.append(
                    _d(
                        Code.BLOCK_CYCLE,
                        "expected parent_idx links to end at block 0, got a cycle",
                        block=i,
                    )
                )
                return False
            chain[at] = None
            at = program.blocks[at].parent_idx
        for depth, link in enumerate(reversed(chain), start=depths[at] + 1):
            depths[link] = depth
        if depths[i] > policy.max_nesting:
            out.append(
                _d(
                    Code.NESTING_TOO_DEEP,
                    f"expected nesting depth <= {policy.max_nesting}, got {depths[i]}",
                    block=i,
                )
            )
            return False
    return True


def _check_sub_block_refs(program: pb.ProgramDesc, out: list[Diagnostic]) -> None:
    count = len(program.blocks)
    owner: dict[int, tuple[int, int]] = {}
    for b, i, op in _all_ops(program):
        for attr in op.attrs:
            refs = (
                [attr.block_idx]
                if attr.type == pb.BLOCK
                else list(attr.blocks_idx)
                if attr.type == pb.BLOCKS
                else []
            )
            for ref in refs:
                # NOTE: block 0 is every block's ancestor, so a reference to it is a cycle.
                if not 0 <= ref < count:
                    out.append(
                        _op(
                            Code.BLOCK_REFERENCE,
                            b,
                            i,
                            op,
                            f"attribute {attr.name!r}: expected a sub-block index in [1, {count}), got {ref}",
                        )
                    )
                elif ref == b or _is_ancestor(program, ref, b):
                    out.append(
                        _op(
                            Code.BLOCK_CYCLE,
                            b,
                            i,
                            op,
                            f"attribute {attr.name!r}: block {ref} is this op's own block or an ancestor of it",
                        )
                    )
                elif program.blocks[ref].parent_idx != b:
                    out.append(
                        _op(
                            Code.BLOCK_REFERENCE,
                            b,
                            i,
                            op,
                            f"attribute {attr.name!r}: expected block {ref} to have parent_idx {b}, got {program.blocks[ref].parent_idx}",
                        )
                    )
                elif ref in owner:
                    out.append(
                        _op(
                            Code.BLOCK_REFERENCE,
                            b,
                            i,
                            op,
                            f"attribute {attr.name!r}: block {ref} is already owned by block {owner[ref][0]}, op {owner[ref][1]}",
                        )
                    )
                else:
                    owner[ref] = (b, i)
    for ref in range(1, count):
        if ref not in owner:
            out.append(
                _d(
                    Code.BLOCK_UNREFERENCED,
                    "expected a sub-block owned by one op, got none",
                    block=ref,
                )
            )


def _is_ancestor(program: pb.ProgramDesc, candidate: int, block: int) -> bool:
    at = block
    while at != 0:
        at = program.blocks[at].parent_idx
        if at == candidate:
            return True
    return False


def _check_vars(
    program: pb.ProgramDesc, policy: Policy, s: Structure, out: list[Diagnostic]
) -> None:
    persistable: set[str] = set()
    s.parents = [block.parent_idx for block in program.blocks]
    for b, block in enumerate(program.blocks):
        names: dict[str, pb.VarDesc] = {}
        for var in block.vars:
            if _check_name(var.name, policy, out, b) and var.name in names:
                out.append(
                    _d(
                        Code.NAME_INVALID,
                        "expected each var to be declared once per block, got it twice",
                        block=b,
                        var=var.name,
                    )
                )
            names[var.name] = var
            declared = _declared_type(var, b, policy, s, out)
            if declared is not None and b == 0:
                s.declared[var.name] = declared
            if var.persistable and var.type.type == VT.DENSE_TENSOR:
                persistable.add(var.name)
        s.vars.append(names)
    s.persistable = sorted(persistable)
    for b in range(1, len(s.vars)):
        for name in s.vars[b]:
            # NOTE: one name, one variable: a sub-block var hiding an outer one would let a body
            # write what looks like a parent var (and inference keeps types by name).
            outer = _enclosing_declaration(s, b, name)
            if outer is not None:
                out.append(
                    _d(
                        Code.NAME_INVALID,
                        f"expected names distinct from those of enclosing blocks, got one block {outer} declares too",
                        block=b,
                        var=name,
                    )
                )


def _enclosing_declaration(s: Structure, block: int, name: str) -> int | None:
    found = s.lookup(s.parents[block], name)
    return None if found is None else found[0]


def _check_name(name: str, policy: Policy, out: list[Diagnostic], block: int) -> bool:
    if GRAD_MARKER in name:
        out.append(
            _d(
                Code.TRAINING_PROGRAM,
                f"expected inference vars only, got gradient var {name[: policy.max_name_length]!r}",
                block=block,
            )
        )
        return False
    if len(name) > policy.max_name_length or not _NAME.fullmatch(name):
        shown = name[: policy.max_name_length] + (
            "..." if len(name) > policy.max_name_length else ""
        )
        out.append(
            _d(
                Code.NAME_INVALID,
                f"expected a name of 1..{policy.max_name_length} characters from [A-Za-z0-9_.@/:-], got {shown!r} ({len(name)} characters)",
                block=block,
            )
        )
        return False
    return True


def _declared_type(
    var: pb.VarDesc, b: int, policy: Policy, s: Structure, out: list[Diagnostic]
) -> TensorType | None:
    kind = var.type.type
    if kind in _HOLDERS and b == 0 and var.persistable:
        _register_holder(var.name, kind, s, out)
        return None
    if kind == VT.STEP_SCOPES and not var.persistable:
        # The Scope/StepScopes output of conditional_block and while: Paddle's bookkeeping of
        # the child scopes, never a tensor (interpret.py lets nothing else write or read it).
        s.step_scopes.add(var.name)
        return None
    if kind != VT.DENSE_TENSOR:
        out.append(
            _d(
                Code.VAR_TYPE,
                f"expected a dense tensor, got {VT.Type.Name(kind)}",
                block=b,
                var=var.name,
            )
        )
        return None
    dense = var.type.dense_tensor
    if not var.type.HasField("dense_tensor"):
        out.append(
            _d(
                Code.VAR_TYPE,
                "expected a dense tensor description, got none",
                block=b,
                var=var.name,
            )
        )
        return None
    if dense.legacy_lod_level != 0:
        out.append(
            _d(
                Code.VAR_TYPE,
                f"expected LoD level 0, got {dense.legacy_lod_level}",
                block=b,
                var=var.name,
            )
        )
    dtype = dtype_from_vartype(dense.tensor.data_type)
    if dtype is None:
        out.append(
            _d(
                Code.VAR_TYPE,
                f"expected a supported element type, got {VT.Type.Name(dense.tensor.data_type)}",
                block=b,
                var=var.name,
            )
        )
        return None
    dims = tuple(dense.tensor.dims)
    if not (var.persistable or var.need_check_feed):
        # NOTE: the stored dims of an intermediate are advisory (Paddle re-infers them), and
        # Paddle itself writes products of unknowns there (cumsum: [-12], instance_norm: [-3]).
        dims = tuple(max(d, -1) for d in dims)
    if not _dims_ok(dims, dtype, policy):
        out.append(
            _d(
                Code.VAR_DIMS_INVALID,
                f"expected rank <= {_MAX_RANK} and dims in [-1, {policy.max_dim}] with a byte size below 2**62, got {list(dims)[:8]}{'...' if len(dims) > 8 else ''}",
                block=b,
                var=var.name,
            )
        )
        return None
    return TensorType(dtype, dims)


def _register_holder(
    name: str, kind: pb.VarType.Type.ValueType, s: Structure, out: list[Diagnostic]
) -> None:
    attr = _HOLDERS[kind]
    first = getattr(s, attr)
    if first is None:
        setattr(s, attr, name)
        return
    out.append(
        _d(
            Code.FEED_FETCH_INVALID,
            f"expected one {VT.Type.Name(kind)} holder var, got {name!r} after {first!r}",
            block=0,
            var=name,
        )
    )


def _dims_ok(dims: tuple[int, ...], dtype: DType, policy: Policy) -> bool:
    if len(dims) > _MAX_RANK or any(d < -1 or d > policy.max_dim for d in dims):
        return False
    count = dtype.itemsize
    for d in dims:
        count *= max(d, 1)
        if count > _ELEMENT_LIMIT:
            return False
    return True


def _check_ops(program: pb.ProgramDesc, out: list[Diagnostic]) -> None:
    """Forbidden and training ops anywhere, sub-blocks included."""
    for b, i, op in _all_ops(program):
        reason = forbidden_reason(op.type)
        if reason is not None:
            out.append(_op(Code.OP_FORBIDDEN, b, i, op, reason))
        elif is_training_op(op.type):
            out.append(
                _op(
                    Code.TRAINING_PROGRAM,
                    b,
                    i,
                    op,
                    f"expected inference ops only, got training op {op.type!r}",
                )
            )
        elif b > 0 and op.type in {FEED_OP, FETCH_OP}:
            out.append(
                _op(
                    Code.FEED_FETCH_INVALID,
                    b,
                    i,
                    op,
                    f"expected {op.type} ops in block 0 only, got one in block {b}",
                )
            )


def _check_feed_fetch(
    program: pb.ProgramDesc, policy: Policy, s: Structure, out: list[Diagnostic]
) -> None:
    for kind, holder, table, cap in (
        (FEED_OP, s.feed_holder, s.feeds, policy.max_feeds),
        (FETCH_OP, s.fetch_holder, s.fetches, policy.max_fetches),
    ):
        for i, op in enumerate(program.blocks[0].ops):
            if op.type == kind:
                _register_col(op, i, kind, holder, table, out)
        if len(table) > cap:
            out.append(
                _d(Code.TOO_MANY_FEEDS, f"expected at most {cap} {kind} ops, got {len(table)}")
            )
        elif sorted(table) != list(range(len(table))):
            out.append(
                _d(
                    Code.FEED_FETCH_INVALID,
                    f"expected {kind} cols 0..{len(table) - 1}, got {sorted(table)[:10]}",
                )
            )
    if not s.fetches and not any(d.code == Code.FEED_FETCH_INVALID for d in out):
        out.append(_d(Code.NO_FETCH, "expected at least one fetch op, got none"))


def _register_col(
    op: pb.OpDesc,
    i: int,
    kind: str,
    holder: str | None,
    table: dict[int, str],
    out: list[Diagnostic],
) -> None:
    col = next((a.i for a in op.attrs if a.name == "col" and a.type == pb.INT), None)
    slot_in, slot_out = ("X", "Out")
    target_slot, holder_slot = (slot_out, slot_in) if kind == FEED_OP else (slot_in, slot_out)
    targets = [
        a
        for v in (op.outputs if kind == FEED_OP else op.inputs)
        if v.parameter == target_slot
        for a in v.arguments
    ]
    holders = [
        a
        for v in (op.inputs if kind == FEED_OP else op.outputs)
        if v.parameter == holder_slot
        for a in v.arguments
    ]
    if holder is None or holders != [holder] or len(targets) != 1:
        out.append(
            _op(
                Code.FEED_FETCH_INVALID,
                0,
                i,
                op,
                f"expected {holder_slot}=[{holder!r}] (the {kind} holder) and one target var, got {holder_slot}={holders} and {len(targets)} targets",
            )
        )
        return
    if col is None or col < 0:
        out.append(
            _op(
                Code.FEED_FETCH_INVALID,
                0,
                i,
                op,
                f"expected an INT attribute 'col' >= 0, got {col}",
            )
        )
        return
    if col in table:
        out.append(
            _op(
                Code.FEED_FETCH_INVALID,
                0,
                i,
                op,
                f"expected each {kind} col once, got col {col} again",
            )
        )
        return
    if kind == FEED_OP and targets[0] in table.values():
        out.append(
            _op(
                Code.FEED_FETCH_INVALID,
                0,
                i,
                op,
                f"expected each var fed once, got {targets[0]!r} again",
            )
        )
        return
    table[col] = targets[0]


def _all_ops(program: pb.ProgramDesc) -> Iterator[tuple[int, int, pb.OpDesc]]:
    for b, block in enumerate(program.blocks):
        for i, op in enumerate(block.ops):
            yield b, i, op


def _d(code: Code, message: str, *, block: int | None = None, var: str | None = None) -> Diagnostic:
    return Diagnostic(code=code, message=message, block=block, var=var)


def _op(code: Code, block: int, index: int, op: pb.OpDesc, message: str) -> Diagnostic:
    return Diagnostic(code=code, message=message, block=block, op_index=index, op_type=op.type[:64])
