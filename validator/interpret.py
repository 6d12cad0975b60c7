"""Walks block 0 op by op, and each sub-block inside the op that owns it: allowlist, binding,
def-use rules (with Paddle's lookup through enclosing blocks), and shape/dtype inference."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from graph_proto import framework_pb2 as pb
from graph_proto.types import DType
from validator.bind import BindError, BoundOp, bind
from validator.budget import over_cap
from validator.diagnostics import Code, Diagnostic
from validator.infer import (
    BodyError,
    check_dims,
    infer_block,
    infer_recorded,
    scope_over,
    tensor_bytes,
)
from validator.ops import GraphError, Registry, TensorType
from validator.ops.control import BLOCK_OPS, CONDITIONAL_BLOCK_OP, WHILE_OP
from validator.policy import Policy, forbidden_reason, is_training_op
from validator.structure import Structure

_MAX_VAR_PROBLEMS_PER_OP: Final = 8
_SCOPE_SLOTS: Final = frozenset({"Scope", "StepScopes"})
# In-place outputs that change the value (batch_norm's MeanOut = Mean in an inference program
# does not): written to a parameter, they are a write like any other.
_CHANGES_IN_PLACE: Final = frozenset({"increment", "set_value"})
# Op inferences spent, at most, on running a loop at compile time to find a known trip count.
_TRIP_SIMULATION_WORK: Final = 100_000

Condition = tuple[str, int, bool]  # a boolean var, the version of it meant, and polarity


@dataclass
class Interpretation:
    ops: list[BoundOp] = field(default_factory=list)
    types: dict[str, TensorType] = field(default_factory=dict)


@dataclass
class _Walk:
    """What every block's walk shares: names are unique across a block and its ancestors
    (structure.py), so one set per kind of fact is enough."""

    s: Structure
    registry: Registry
    policy: Policy
    out: list[Diagnostic]
    unused: set[str] = field(default_factory=set)  # training-only outputs: never read
    failed: set[str] = field(default_factory=set)  # outputs of rejected ops: readers skipped
    # Which condition each conditional_block output depends on, and what logical_not and
    # cast(bool -> int32) make of conditions: a select_input must pick a branch value only
    # when its branch ran. Versions count writes, so a condition rewritten in a loop body
    # is a different condition.
    guards: dict[str, Condition] = field(default_factory=dict)
    negations: dict[str, Condition] = field(default_factory=dict)
    masks: dict[str, Condition] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)


@dataclass
class _Frame:
    """One block being walked: what is defined so far, and the types visible in it."""

    block: int
    owner: BoundOp | None  # the op owning this block; None for block 0
    defined: set[str]
    types: MutableMapping[str, TensorType]
    written_outer: set[str] = field(default_factory=set)  # enclosing blocks' vars written
    # Enclosing blocks' vars the block lists as outputs but leaves unchanged: inference-mode
    # statistics (batch_norm MeanOut = Mean), which Paddle lists in the owner's Out too.
    unchanged_outer: set[str] = field(default_factory=set)


def interpret(
    block: pb.BlockDesc,
    s: Structure,
    params: Mapping[str, TensorType],
    registry: Registry,
    policy: Policy,
    out: list[Diagnostic],
) -> Interpretation:
    """Binds and infers every op of block 0 (sub-blocks inside their owners, read from
    s.blocks); every problem goes to `out`, none is raised."""
    assert block is s.blocks[0]
    result = Interpretation(types=dict(params))
    for name in s.feeds.values():
        if name in s.declared:
            result.types[name] = s.declared[name]
    walk = _Walk(s, registry, policy, out)
    holders = {h for h in (s.feed_holder, s.fetch_holder) if h is not None}
    frame = _Frame(0, None, set(params) | holders, result.types)
    result.ops = _walk_block(walk, frame)
    return result


def _walk_block(walk: _Walk, frame: _Frame) -> list[BoundOp]:
    ops: list[BoundOp] = []
    for index, op in enumerate(walk.s.blocks[frame.block].ops):
        bound = _bind(op, index, frame.block, walk)
        if bound is None:
            walk.failed.update(a for v in op.outputs for a in v.arguments)
            continue
        problem = _check_def_use(bound, walk, frame)
        if problem or not _feed_is_typed(bound, frame):
            walk.failed.update(bound.writes())
            continue
        if bound.op_type in BLOCK_OPS:
            owner = _walk_sub_block(bound, walk, frame)
            if owner is None:
                walk.failed.update(bound.writes())
                continue
            bound = owner
        if bound.op_type == WHILE_OP and not _check_known_trips(bound, frame, walk):
            continue
        recorded = _infer(bound, frame, walk)
        if recorded is None:
            continue
        bound = recorded
        ops.append(bound)
        _track_conditions(bound, frame, walk)
        frame.defined.update(bound.writes())
        walk.unused.update(_unused_writes(bound))
    return ops


def _bind(op: pb.OpDesc, index: int, block: int, walk: _Walk) -> BoundOp | None:
    if forbidden_reason(op.type) is not None or is_training_op(op.type):
        return None  # already reported by the structure checks
    op_def = walk.registry.get(op.type)
    if op_def is None:
        code, message = Code.OP_UNKNOWN, f"expected a registered op type, got {op.type[:64]!r}"
    elif not walk.policy.allows(op.type):
        code, message = (
            Code.OP_NOT_ALLOWED,
            f"op {op.type!r} is not allowed by this tenant's policy",
        )
    elif op.type == WHILE_OP and walk.policy.max_loop_trips is None:
        code, message = (
            Code.LOOP_UNBOUNDED,
            "expected a loop trip bound from the tenant policy, got none (loops are not allowed)",
        )
    else:
        try:
            return bind(op, op_def, index, block)
        except BindError as e:
            code, message = e.code, str(e)
    walk.out.append(_diag(code, block, index, op.type, message))
    return None


def _walk_sub_block(bound: BoundOp, walk: _Walk, frame: _Frame) -> BoundOp | None:
    """Walks the block `bound` owns; returns `bound` with the block's ops, or None."""
    sub = bound.attrs.sub_block.idx
    if not 0 < sub < len(walk.s.vars) or walk.s.parents[sub] != frame.block:
        return None  # a bad reference, already reported by the structure checks
    inner = _Frame(sub, bound, set(frame.defined), scope_over(frame.types))
    errors = _error_count(walk.out)
    body = _walk_block(walk, inner)
    if _error_count(walk.out) > errors:
        return None
    problems = list(_owner_problems(bound, inner))
    for code, name, message in problems:
        walk.out.append(_diag(code, frame.block, bound.index, bound.op_type, message, var=name))
    if problems:
        return None
    return dataclasses.replace(bound, blocks=(tuple(body),))


def _owner_problems(bound: BoundOp, inner: _Frame) -> Iterator[Problem]:
    sub = inner.block
    cond = bound.inputs["Condition"][0] if bound.op_type == WHILE_OP else None
    for name in bound.outputs.get("Out", ()):
        if name not in inner.written_outer | inner.unchanged_outer and name != cond:
            message = f"Out lists {name!r}, but sub-block {sub} never writes it"
            yield Code.SUB_BLOCK_OUTPUTS, name, message
    if cond is not None and cond not in inner.written_outer:
        message = (
            f"expected sub-block {sub} to recompute the condition {cond!r}, got no write to it"
        )
        yield Code.LOOP_UNBOUNDED, cond, message


def _error_count(out: list[Diagnostic]) -> int:
    return sum(1 for d in out if d.severity == "error")


def _check_def_use(bound: BoundOp, walk: _Walk, frame: _Frame) -> bool:
    """True when the op cannot be inferred (a problem was reported, or it reads a failed var)."""
    if walk.failed.intersection(bound.reads()):
        return True
    problems = itertools.chain(
        _read_problems(bound, walk, frame),
        _write_problems(bound, walk, frame),
        _guard_problems(bound, walk),
    )
    # NOTE: one op may name a million undefined vars; a few diagnostics say enough.
    shown = list(itertools.islice(problems, _MAX_VAR_PROBLEMS_PER_OP))
    walk.out.extend(
        _diag(code, frame.block, bound.index, bound.op_type, msg, var=name)
        for code, name, msg in shown
    )
    return bool(shown)


Problem = tuple[Code, str, str]  # code, var, message


def _read_problems(bound: BoundOp, walk: _Walk, frame: _Frame) -> Iterator[Problem]:
    holders = {walk.s.feed_holder, walk.s.fetch_holder} - {None}
    for name in dict.fromkeys(bound.reads()):  # once per var, even when read by two slots
        if (name in holders and bound.op_type != "feed") or name in walk.s.step_scopes:
            yield (
                Code.VAR_TYPE,
                name,
                f"reads {name!r}, a feed/fetch holder or scope list, not a tensor",
            )
        elif name in walk.unused:
            message = f"reads {name!r}, a training-only output that has no defined value"
            yield Code.VAR_READS_UNUSED, name, message
        elif name not in frame.defined:
            where = "" if frame.block == 0 else " in this block or an enclosing one"
            message = (
                f"reads {name!r}, which is not fed, a parameter, or written by an earlier op{where}"
            )
            yield Code.VAR_UNDEFINED, name, message


def _write_problems(bound: BoundOp, walk: _Walk, frame: _Frame) -> Iterator[Problem]:
    if bound.op_type == "fetch":
        return
    aliases = _inplace_aliases(bound)
    unchanged = _unchanged_statistics(bound)
    if bound.op_type in BLOCK_OPS:
        # A parameter the owner lists in Out, but that its blocks leave unchanged.
        params = {n for n in bound.outputs.get("Out", ()) if _is_persistable(walk, frame, n)}
        unchanged |= params - _block_writes(bound, walk) if params else set()
    for slot, names in bound.outputs.items():
        for name in names:
            problem = _write_problem(bound, slot, name, walk, frame, (aliases, unchanged))
            if problem is not None:
                yield problem


def _write_problem(
    bound: BoundOp,
    slot: str,
    name: str,
    walk: _Walk,
    frame: _Frame,
    names: tuple[set[str], set[str]],
) -> Problem | None:
    """`names`: the in-place aliases of the op, and its outputs that stay unchanged."""
    aliases, unchanged = names
    found = walk.s.lookup(frame.block, name)
    if found is None:
        return (
            Code.VAR_UNDECLARED,
            name,
            f"writes {name!r}, which has no VarDesc in this block or an enclosing one",
        )
    owner_block, var = found
    if (name in walk.s.step_scopes) != (slot in _SCOPE_SLOTS):
        return (
            Code.VAR_TYPE,
            name,
            f"writes {name!r} through slot {slot!r}: expected scope lists only in Scope/StepScopes",
        )
    if slot in _SCOPE_SLOTS:
        return None
    if name in unchanged:
        if owner_block != frame.block:
            frame.unchanged_outer.add(name)
        return None
    in_place = name in aliases and owner_block == frame.block
    if in_place and not (var.persistable and bound.op_type in _CHANGES_IN_PLACE):
        return None
    if var.persistable:
        if frame.block > 0:
            message = f"writes {name!r}, a persistable parameter, from sub-block {frame.block}; parameters are read-only"
            return Code.SUB_BLOCK_WRITES_PARAM, name, message
        message = f"writes {name!r}, a persistable parameter; parameters are read-only"
        return Code.VAR_WRITES_PARAM, name, message
    if owner_block != frame.block:
        assert frame.owner is not None
        if name not in frame.owner.outputs.get("Out", ()):
            message = f"writes {name!r} of block {owner_block}, which op {frame.owner.index} ({frame.owner.op_type}) does not list in Out"
            return Code.SUB_BLOCK_OUTPUTS, name, message
        frame.written_outer.add(name)
        return None
    if bound.op_type == WHILE_OP:  # a loop var: Out is a while's one slot besides StepScopes
        if name not in frame.defined:
            message = f"loop var {name!r} is not defined before the while; expected a value for the first iteration"
            return Code.VAR_UNDEFINED, name, message
        return None
    if name in frame.defined and bound.op_type != "feed":  # an in-place alias returned above
        return (
            Code.VAR_REDEFINED,
            name,
            f"writes {name!r}, which an earlier op or feed already defined",
        )
    return None


def _guard_problems(bound: BoundOp, walk: _Walk) -> Iterator[Problem]:
    """A branch output is defined only when its branch ran: only a select_input whose Mask is
    that branch's condition may read it. Every select_input's Mask must be a cast condition, so
    that it is 0 or 1 (Paddle fails on any other value)."""
    choices: Sequence[str] = ()
    picks: list[tuple[Condition, str]] = []  # (the condition it is picked on, branch value)
    if bound.op_type == "select_input":
        mask = walk.masks.get(bound.inputs["Mask"][0])
        if mask is None:
            message = "expected a Mask cast to int32 from a boolean condition, so that it is 0 or 1"
            yield Code.BRANCH_OUTPUT_UNGUARDED, bound.inputs["Mask"][0], message
            return
        choices = bound.inputs.get("X", ())
        picks = [(_polarity(mask, i == 1), name) for i, name in enumerate(choices)]
    for name in dict.fromkeys(bound.reads()):
        guard = walk.guards.get(name)
        if guard is None:
            continue
        wanted = {choice for condition, choice in picks if condition == guard}
        if name in wanted and choices.count(name) == 1:
            continue
        message = f"reads {name!r}, which conditional_block writes only when {guard[0]!r} is {guard[2]}; expected a select_input picking it on that condition"
        yield Code.BRANCH_OUTPUT_UNGUARDED, name, message


def _polarity(condition: Condition, positive: bool) -> Condition:
    root, version, polarity = condition
    return root, version, polarity if positive else not polarity


def _track_conditions(bound: BoundOp, frame: _Frame, walk: _Walk) -> None:
    def normal(name: str) -> Condition:
        return walk.negations.get(name) or (name, walk.versions.get(name, 0), True)

    facts: list[tuple[dict[str, Condition], str, Condition]] = []
    if bound.op_type == "logical_not":
        (x,), (out,) = bound.inputs["X"], bound.outputs["Out"]
        facts.append((walk.negations, out, _polarity(normal(x), False)))
    elif bound.op_type == "cast" and bound.attrs.out_dtype == int(DType.INT32):
        (x,), (out,) = bound.inputs["X"], bound.outputs["Out"]
        if frame.types[x].dtype == DType.BOOL:
            facts.append((walk.masks, out, normal(x)))
    elif bound.op_type == CONDITIONAL_BLOCK_OP:
        # Only a var the branch defines is undefined when it does not run; one defined before
        # keeps its value.
        (cond,) = bound.inputs["Cond"]
        fresh = [name for name in bound.outputs.get("Out", ()) if name not in frame.defined]
        facts.extend((walk.guards, name, normal(cond)) for name in fresh)
    for name in bound.writes():
        walk.versions[name] = walk.versions.get(name, 0) + 1
        for table in (walk.negations, walk.masks, walk.guards):
            table.pop(name, None)
    for table, name, condition in facts:
        table[name] = condition


def _feed_is_typed(bound: BoundOp, frame: _Frame) -> bool:
    """A feed whose target has no declared type (bad col, holder or VarDesc, all reported by the
    structure checks) cannot be inferred."""
    return bound.op_type != "feed" or all(n in frame.types for n in bound.writes())


def _inplace_aliases(bound: BoundOp) -> set[str]:
    """Outputs that may legally share a var with an input slot (batch_norm MeanOut = Mean)."""
    aliases: set[str] = set()
    for out in bound.op_def.outputs:
        if out.inplace_of is None:
            continue
        sources = set(bound.inputs.get(out.inplace_of, ()))
        aliases.update(n for n in bound.outputs.get(out.slot, ()) if n in sources)
    return aliases


def _unchanged_statistics(bound: BoundOp) -> set[str]:
    """Outputs that alias their input and that inference never writes: the running statistics
    of an inference-mode batch_norm (MeanOut = Mean; its rule refuses training mode)."""
    return {
        name
        for out in bound.op_def.outputs
        if out.unused and out.inplace_of is not None
        for name in bound.outputs.get(out.slot, ())
        if name in bound.inputs.get(out.inplace_of, ())
    }


def _is_persistable(walk: _Walk, frame: _Frame, name: str) -> bool:
    found = walk.s.lookup(frame.block, name)
    return found is not None and found[1].persistable


def _block_writes(owner: BoundOp, walk: _Walk) -> set[str]:
    """Every var the ops of `owner`'s sub-block (and of the blocks they own) write, but for
    unchanged statistics. Read from the OpDescs before the block is walked, so that the owner's
    Out may list a parameter that only an inference-mode batch_norm inside names."""
    written: set[str] = set()
    pending = [owner.attrs.sub_block.idx]
    seen: set[int] = set()
    while pending:
        block = pending.pop()
        if not 0 < block < len(walk.s.blocks) or block in seen:
            continue  # a bad reference, reported by the structure checks
        seen.add(block)
        for op in walk.s.blocks[block].ops:
            written.update(_raw_writes(op, walk))
            for attr in op.attrs:
                pending.extend([attr.block_idx] if attr.type == pb.BLOCK else attr.blocks_idx)
    return written


def _raw_writes(op: pb.OpDesc, walk: _Walk) -> set[str]:
    if op.type in BLOCK_OPS:
        return set()  # its Out lists what the ops of its block write, scanned on their own
    op_def = walk.registry.get(op.type)
    inputs = {v.parameter: set(v.arguments) for v in op.inputs}
    written: set[str] = set()
    for v in op.outputs:
        out = op_def.out_slot(v.parameter) if op_def is not None else None
        kept = inputs.get(out.inplace_of or "", set()) if out is not None and out.unused else set()
        written.update(name for name in v.arguments if name not in kept)
    return written


def _unused_writes(bound: BoundOp) -> set[str]:
    aliases = _inplace_aliases(bound)
    return {
        name
        for out in bound.op_def.outputs
        if out.unused and out.slot not in _SCOPE_SLOTS
        for name in bound.outputs.get(out.slot, ())
        if name not in aliases
    }


def _infer(bound: BoundOp, frame: _Frame, walk: _Walk) -> BoundOp | None:
    """Infers the op into the frame's types; returns it with its types recorded, or None
    (reported, outputs failed) on a problem."""
    try:
        recorded = infer_recorded(bound, frame.types)
        inferred = recorded.types_out
        problem = _too_large(bound, frame.block, inferred, walk.policy)
    except BodyError as e:  # an op inside the sub-block, under the types of a later iteration
        problem = _diag(e.code, e.op.block, e.op.index, e.op.op_type, str(e))
    except GraphError as e:  # only graph problems; a bug in a rule must crash loudly
        problem = _diag(e.code, frame.block, bound.index, bound.op_type, str(e))
    if problem is not None:
        walk.out.append(problem)
        walk.failed.update(bound.writes())
        return None
    frame.types.update(inferred)
    return recorded


def _too_large(
    bound: BoundOp, block: int, inferred: Mapping[str, TensorType], policy: Policy
) -> Diagnostic | None:
    """The first output over the policy's caps, reported; raises GraphError on bad dims."""
    for name, tensor in inferred.items():
        check_dims(tensor)
        problem = over_cap(tensor, tensor_bytes(tensor), policy)
        if problem is not None:
            shown = f"output {name!r} {tensor.dtype.label}{list(tensor.shape)}"
            message = f"{shown}: {problem}"
            return _diag(
                Code.TENSOR_TOO_LARGE, block, bound.index, bound.op_type, message, var=name
            )
    return None


def _check_known_trips(bound: BoundOp, frame: _Frame, walk: _Walk) -> bool:
    """A loop whose condition inference knows (constants) is run at compile time, within a work
    cap: one that runs past the policy's bound would fail every request, so it is rejected."""
    bound_trips = walk.policy.max_loop_trips
    assert bound_trips is not None
    trips = _known_trips(bound, frame.types, bound_trips)
    if trips is None or trips <= bound_trips:
        return True
    message = f"expected at most {bound_trips} iterations (the policy's bound), got a condition known at compile time to hold for at least {trips}"
    walk.out.append(
        _diag(Code.LOOP_BOUND_OVER_POLICY, frame.block, bound.index, bound.op_type, message)
    )
    walk.failed.update(bound.writes())
    return False


def _known_trips(bound: BoundOp, types: Mapping[str, TensorType], limit: int) -> int | None:
    """Iterations until the condition turns false, up to limit + 1; None when not known."""
    (body,) = bound.blocks
    (cond,) = bound.inputs["Condition"]
    carried = bound.outputs.get("Out", ())
    state = {name: types[name] for name in carried}
    for trips in range(limit + 2):
        value = state[cond].value
        if value is None or (trips + 1) * max(len(body), 1) > _TRIP_SIMULATION_WORK:
            return None
        if not all(value):
            return trips
        try:
            after = infer_block(body, scope_over(state, types))
        except GraphError:
            return None
        state = {name: after[name] for name in carried}
    return limit + 1


def _diag(
    code: Code, block: int, index: int, op_type: str, message: str, var: str | None = None
) -> Diagnostic:
    return Diagnostic(
        code=code, message=message, block=block, op_index=index, op_type=op_type[:64], var=var
    )
