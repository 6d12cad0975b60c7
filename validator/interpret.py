"""Walks block 0 op by op: allowlist, binding, def-use rules, and shape/dtype inference."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final

from graph_proto import framework_pb2 as pb
from validator.bind import BindError, BoundOp, bind
from validator.budget import dim_over_cap
from validator.diagnostics import Code, Diagnostic
from validator.infer import check_dims, infer_op, tensor_bytes
from validator.ops._def import GraphError, Registry, TensorType
from validator.policy import Policy, forbidden_reason, is_training_op
from validator.structure import Structure

_MAX_VAR_PROBLEMS_PER_OP: Final = 8


@dataclass
class Interpretation:
    ops: list[BoundOp] = field(default_factory=list)
    types: dict[str, TensorType] = field(default_factory=dict)


def interpret(
    block: pb.BlockDesc,
    s: Structure,
    params: Mapping[str, TensorType],
    registry: Registry,
    policy: Policy,
    out: list[Diagnostic],
) -> Interpretation:
    """Binds and infers every op of block 0; every problem goes to `out`, none is raised."""
    result = Interpretation(types=dict(params))
    for name in s.feeds.values():
        if name in s.declared:
            result.types[name] = s.declared[name]
    defined = set(params) | {h for h in (s.feed_holder, s.fetch_holder) if h is not None}
    unused: set[str] = set()  # training-only outputs: must never be read
    failed: set[str] = set()  # outputs of rejected ops: their readers are skipped, not reported
    for index, op in enumerate(block.ops):
        bound = _bind(op, index, registry, policy, out)
        if bound is None:
            failed.update(a for v in op.outputs for a in v.arguments)
            continue
        problem = _check_def_use(bound, s, defined, unused, failed, out)
        if problem or not _feed_is_typed(bound, result):
            failed.update(bound.writes())
            continue
        _infer(bound, result, policy, out, failed)
        result.ops.append(bound)
        defined.update(bound.writes())
        unused.update(_unused_writes(bound))
    return result


def _bind(
    op: pb.OpDesc, index: int, registry: Registry, policy: Policy, out: list[Diagnostic]
) -> BoundOp | None:
    if forbidden_reason(op.type) is not None or is_training_op(op.type):
        return None  # already reported by the structure checks
    op_def = registry.get(op.type)
    if op_def is None:
        out.append(
            _diag(
                Code.OP_UNKNOWN,
                index,
                op.type,
                f"expected a registered op type, got {op.type[:64]!r}",
            )
        )
        return None
    if not policy.allows(op.type):
        out.append(
            _diag(
                Code.OP_NOT_ALLOWED,
                index,
                op.type,
                f"op {op.type!r} is not allowed by this tenant's policy",
            )
        )
        return None
    try:
        return bind(op, op_def, index, 0)
    except BindError as e:
        out.append(_diag(e.code, index, op.type, str(e)))
        return None


def _check_def_use(
    bound: BoundOp,
    s: Structure,
    defined: set[str],
    unused: set[str],
    failed: set[str],
    out: list[Diagnostic],
) -> bool:
    """True when the op cannot be inferred (a problem was reported, or it reads a failed var)."""
    if failed.intersection(bound.reads()):
        return True
    problems = itertools.chain(
        _read_problems(bound, s, defined, unused), _write_problems(bound, s, defined)
    )
    # NOTE: one op may name a million undefined vars; a few diagnostics say enough.
    shown = list(itertools.islice(problems, _MAX_VAR_PROBLEMS_PER_OP))
    out.extend(_diag(code, bound.index, bound.op_type, msg, var=name) for code, name, msg in shown)
    return bool(shown)


Problem = tuple[Code, str, str]  # code, var, message


def _read_problems(
    bound: BoundOp, s: Structure, defined: set[str], unused: set[str]
) -> Iterator[Problem]:
    holders = {s.feed_holder, s.fetch_holder} - {None}
    for name in dict.fromkeys(bound.reads()):  # once per var, even when read by two slots
        if name in holders and bound.op_type != "feed":
            yield Code.VAR_TYPE, name, f"reads {name!r}, a feed/fetch holder, not a tensor"
        elif name in unused:
            message = f"reads {name!r}, a training-only output that has no defined value"
            yield Code.VAR_READS_UNUSED, name, message
        elif name not in defined:
            message = f"reads {name!r}, which is not fed, a parameter, or written by an earlier op"
            yield Code.VAR_UNDEFINED, name, message


def _write_problems(bound: BoundOp, s: Structure, defined: set[str]) -> Iterator[Problem]:
    if bound.op_type == "fetch":
        return
    aliases = _inplace_aliases(bound)
    for name in bound.writes():
        var = s.vars[0].get(name)
        if var is None:
            yield Code.VAR_UNDECLARED, name, f"writes {name!r}, which has no VarDesc in block 0"
        elif name in aliases:
            continue
        elif var.persistable:
            message = f"writes {name!r}, a persistable parameter; parameters are read-only"
            yield Code.VAR_WRITES_PARAM, name, message
        elif name in defined and bound.op_type != "feed":
            message = f"writes {name!r}, which an earlier op or feed already defined"
            yield Code.VAR_REDEFINED, name, message


def _feed_is_typed(bound: BoundOp, result: Interpretation) -> bool:
    """A feed whose target has no declared type (bad col, holder or VarDesc, all reported by the
    structure checks) cannot be inferred."""
    return bound.op_type != "feed" or all(n in result.types for n in bound.writes())


def _inplace_aliases(bound: BoundOp) -> set[str]:
    """Outputs that may legally share a var with an input slot (batch_norm MeanOut = Mean)."""
    aliases: set[str] = set()
    for out in bound.op_def.outputs:
        if out.inplace_of is None:
            continue
        sources = set(bound.inputs.get(out.inplace_of, ()))
        aliases.update(n for n in bound.outputs.get(out.slot, ()) if n in sources)
    return aliases


def _unused_writes(bound: BoundOp) -> set[str]:
    aliases = _inplace_aliases(bound)
    return {
        name
        for out in bound.op_def.outputs
        if out.unused
        for name in bound.outputs.get(out.slot, ())
        if name not in aliases
    }


def _infer(
    bound: BoundOp,
    result: Interpretation,
    policy: Policy,
    out: list[Diagnostic],
    failed: set[str],
) -> None:
    try:
        inferred = infer_op(bound, result.types)
        for name, tensor in inferred.items():
            check_dims(tensor)
            size = tensor_bytes(tensor)
            problem = (
                f"expected at most {policy.max_tensor_bytes} bytes, got {size}"
                if size > policy.max_tensor_bytes
                else dim_over_cap(tensor, policy)
            )
            if problem is not None:
                shown = f"output {name!r} {tensor.dtype.label}{list(tensor.shape)}"
                out.append(
                    _diag(
                        Code.TENSOR_TOO_LARGE,
                        bound.index,
                        bound.op_type,
                        f"{shown}: {problem}",
                        var=name,
                    )
                )
                failed.update(bound.writes())
                return
    except GraphError as e:  # only graph problems; a bug in a rule must crash loudly
        out.append(_diag(e.code, bound.index, bound.op_type, str(e)))
        failed.update(bound.writes())
        return
    result.types.update(inferred)


def _diag(code: Code, index: int, op_type: str, message: str, var: str | None = None) -> Diagnostic:
    return Diagnostic(
        code=code, message=message, block=0, op_index=index, op_type=op_type[:64], var=var
    )
