"""validate(): untrusted bytes in, a ValidatedProgram (the executor's only input) or every problem out."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

import numpy as np

from graph_proto import framework_pb2 as pb
from graph_proto.errors import FormatError
from graph_proto.pir import PirOrigin, looks_like_pir, parse_pir
from graph_proto.program import parse_program
from validator.attrs import COMMON_ATTRS
from validator.batch import prove_batchable
from validator.bind import BoundOp
from validator.budget import Cost, measure
from validator.diagnostics import Code, Diagnostic, Severity, ValidationFailed
from validator.dims import (
    Binding,
    DimConstraint,
    DimDeclarationError,
    OpLabel,
    Place,
    initial_binding,
    legacy_op_label,
)
from validator.interpret import interpret
from validator.ops import REGISTRY, Registry, TensorType
from validator.params import match_params
from validator.policy import DEFAULT_POLICY, Policy
from validator.report import Report, TensorSpec
from validator.structure import Structure, check_structure

_TOKEN: Final = object()


@dataclass(frozen=True, slots=True)
class ValidatedProgram:
    """A program that passed every check; only validate() can make one."""

    program: pb.ProgramDesc  # bookkeeping attrs stripped
    ops: tuple[BoundOp, ...]  # block 0 in order, feed and fetch included
    types: Mapping[str, TensorType]  # compile-time type of every var
    params: Mapping[str, np.ndarray]  # read-only views into the params bytes
    report: Report
    policy: Policy
    _token: object

    def __post_init__(self) -> None:
        if self._token is not _TOKEN:
            raise TypeError("a ValidatedProgram is made by validator.validate() only")

    @property
    def inputs(self) -> tuple[TensorSpec, ...]:
        return self.report.inputs

    @property
    def outputs(self) -> tuple[TensorSpec, ...]:
        return self.report.outputs


def validate(
    program_bytes: bytes,
    params_bytes: bytes | memoryview | None = None,
    policy: Policy = DEFAULT_POLICY,
    registry: Registry = REGISTRY,
    dims: Mapping[str, int] | None = None,
) -> ValidatedProgram:
    """Checks everything and returns the program, or raises ValidationFailed with every problem.

    `program_bytes` is a legacy ProgramDesc (.pdmodel) or a PIR program (Paddle 3's .json),
    told apart by content; a PIR program is converted to a ProgramDesc first, and diagnostics
    then point at the PIR op they concern. `dims`: sizes the upload declares for unknown feed
    dims, by symbol (`D1`) or `feed.axis` (validator/dims.py): their budgets' bound, checked
    on every request."""
    if not looks_like_pir(program_bytes):
        legacy = _parse_legacy(program_bytes, policy)
        return _validate(legacy, params_bytes, policy, registry, dims, legacy_op_label)
    try:
        pir = parse_pir(
            program_bytes,
            max_bytes=policy.max_program_bytes,
            max_folded=policy.max_attr_items,
        )
    except FormatError as e:
        raise ValidationFailed([Diagnostic(code=Code[e.code], message=e.message)]) from None
    found = [_pir_diagnostic(e, origin) for e, origin in pir.problems]
    try:
        label = _pir_op_label(pir.origins)
        validated = _validate(pir.program, params_bytes, policy, registry, dims, label)
    except ValidationFailed as failed:
        raise ValidationFailed(
            found + [_at_pir_op(d, pir.origins) for d in failed.diagnostics]
        ) from None
    if found:
        raise ValidationFailed(found)
    return validated


def _parse_legacy(program_bytes: bytes, policy: Policy) -> pb.ProgramDesc:
    try:
        return parse_program(program_bytes, max_bytes=policy.max_program_bytes)
    except FormatError as e:
        raise ValidationFailed([Diagnostic(code=Code[e.code], message=e.message)]) from None


def _pir_diagnostic(error: FormatError, origin: PirOrigin | None) -> Diagnostic:
    if origin is None:
        return Diagnostic(code=Code[error.code], message=error.message)
    return Diagnostic(
        code=Code[error.code],
        message=error.message,
        block=origin.block,
        op_index=origin.index,
        op_type=origin.name,
    )


def _pir_op_label(origins: Mapping[tuple[int, int], PirOrigin]) -> OpLabel:
    """Names an op of the converted program by the PIR op it came from (its block, its index in
    the PIR program's own op order, its `pd_op.*` name), as the tenant's program numbers it: a
    dim constraint's reason, shown in the report and in a refused request, says it."""

    def label(op: BoundOp) -> str:
        origin = origins.get((op.block, op.index))
        if origin is None:  # an op the conversion added (none carries a constraint today)
            return legacy_op_label(op)
        return f"block {origin.block}, op {origin.index} ({origin.name})"

    return label


def _at_pir_op(d: Diagnostic, origins: Mapping[tuple[int, int], PirOrigin]) -> Diagnostic:
    """The diagnostic located at the PIR op its legacy op came from (same fields, PIR numbers)."""
    if d.op_index is None:
        return d
    origin = origins.get((d.block or 0, d.op_index))
    if origin is None:
        return d
    return replace(d, block=origin.block, op_index=origin.index, op_type=origin.name)


def _validate(
    program: pb.ProgramDesc,
    params_bytes: bytes | memoryview | None,
    policy: Policy,
    registry: Registry,
    dims: Mapping[str, int] | None,
    label: OpLabel,
) -> ValidatedProgram:
    out: list[Diagnostic] = []
    if params_bytes is not None and len(params_bytes) > policy.max_params_bytes:
        out.append(
            Diagnostic(
                code=Code.PARAMS_TOO_LARGE,
                message=f"expected a .pdiparams of at most {policy.max_params_bytes} bytes, got {len(params_bytes)}",
            )
        )
        raise ValidationFailed(out)
    s = check_structure(program, policy, out)
    if s.fatal:
        raise ValidationFailed(out)
    params = match_params(params_bytes, s.persistable, s.declared, out)
    param_types = {n: s.declared[n] for n in s.persistable if n in s.declared}
    run = interpret(program.blocks[0], s, param_types, registry, policy, out)
    _cross_check(run.types, s, out)
    _check_param_budget(params, policy, out)
    cost = None
    if not _errors(out):
        feeds = {name: s.declared[name] for _, name in sorted(s.feeds.items())}
        fetches = [name for _, name in sorted(s.fetches.items())]
        try:
            cost = measure(run.ops, feeds, param_types, fetches, policy, out, dims, label)
        except DimDeclarationError as e:
            out.append(Diagnostic(code=Code.DIM_DECLARATION, message=str(e)))
    if _errors(out) or cost is None:
        raise ValidationFailed(_errors(out) or out)
    _strip_bookkeeping(program)
    report = _report(run.ops, run.types, s, params, cost, out, policy)
    return ValidatedProgram(program, tuple(run.ops), run.types, params, report, policy, _TOKEN)


def _errors(out: list[Diagnostic]) -> list[Diagnostic]:
    return [d for d in out if d.severity == Severity.ERROR]


def _cross_check(types: Mapping[str, TensorType], s: Structure, out: list[Diagnostic]) -> None:
    """Stored intermediate dims are advisory in Paddle (it re-infers them at run time), and some
    Paddle rules record dims its own kernels do not produce (matmul_v2 batch broadcasting, gather
    with an Axis tensor): a contradiction is a warning. A contradicting dtype is an error."""
    for name, inferred in types.items():
        declared = s.declared.get(name)
        if declared is None or name in s.persistable:
            continue
        if declared.dtype != inferred.dtype:
            out.append(
                Diagnostic(
                    code=Code.VAR_DTYPE_MISMATCH,
                    message=f"expected dtype {inferred.dtype.label} (inferred), got {declared.dtype.label} stored",
                    block=0,
                    var=name,
                )
            )
        elif not _dims_agree(declared.shape, inferred.shape):
            out.append(
                Diagnostic(
                    code=Code.VAR_DIMS_MISMATCH,
                    severity=Severity.WARNING,
                    message=f"expected dims {list(inferred.shape)} (inferred), got {list(declared.shape)} stored",
                    block=0,
                    var=name,
                )
            )


def _dims_agree(stored: tuple[int, ...], inferred: tuple[int, ...]) -> bool:
    if len(stored) != len(inferred):
        return False
    return all(a < 0 or b < 0 or a == b for a, b in zip(stored, inferred, strict=True))


def _check_param_budget(
    params: Mapping[str, np.ndarray], policy: Policy, out: list[Diagnostic]
) -> None:
    total = sum(p.nbytes for p in params.values())
    if total > policy.max_params_bytes:
        out.append(
            Diagnostic(
                code=Code.PARAMS_TOO_LARGE,
                message=f"expected at most {policy.max_params_bytes} parameter bytes, got {total}",
            )
        )


def _strip_bookkeeping(program: pb.ProgramDesc) -> None:
    """Drops op_callstack & co. (absolute paths of the exporting script) before anything is kept."""
    for block in program.blocks:
        for op in block.ops:
            kept = [a for a in op.attrs if a.name not in COMMON_ATTRS]
            if len(kept) != len(op.attrs):
                del op.attrs[:]
                op.attrs.extend(kept)


def _bounds_in_use(
    binding: Binding, symbolic: Mapping[str, tuple[int | str, ...]]
) -> tuple[tuple[str, int], ...]:
    """Each symbol the signature still names (one unified away or fixed is gone) and the size
    every budget was computed at: its bound, or less where a constraint caps it (a causal mask
    of 128 positions, a broadcast against 4)."""
    named = dict.fromkeys(d for dims in symbolic.values() for d in dims if isinstance(d, str))
    return tuple(
        (symbol, _computed_at(binding, symbol)) for symbol in named if symbol in binding.bounds
    )


def _computed_at(binding: Binding, symbol: str) -> int:
    sizes = [binding.values[place] for place in binding.places_of(symbol)]
    return max(sizes, default=binding.bounds[symbol])


def _report(
    ops: list[BoundOp],
    types: Mapping[str, TensorType],
    s: Structure,
    params: Mapping[str, np.ndarray],
    cost: Cost,
    out: list[Diagnostic],
    policy: Policy,
) -> Report:
    def spec(name: str) -> TensorSpec:
        t = types[name]
        return TensorSpec(name, t.dtype, t.shape)

    # NOTE: a feed's declared type: a while may rewrite the var, and `types` keeps the last.
    # Dims the program fixes (a state input's [-1, ...] that a split into 3 makes [3, ...])
    # are shown, checked and batched as the fixed dims they are.
    feeds = {n: s.declared[n] for _, n in sorted(s.feeds.items())}
    binding = cost.dims
    fixed = _with_fixed_dims(feeds, binding)
    proof = prove_batchable(ops, fixed)
    symbolic = binding.signature(feeds) if binding else _plain_signature(feeds)

    return Report(
        inputs=tuple(TensorSpec(n, t.dtype, t.shape) for n, t in fixed.items()),
        symbolic_inputs=tuple(symbolic.items()),
        dim_constraints=_in_feed_order(binding.constraints, feeds) if binding else (),
        dim_bounds=_bounds_in_use(binding or initial_binding(feeds, policy), symbolic),
        outputs=tuple(spec(n) for _, n in sorted(s.fetches.items())),
        op_histogram=dict(Counter(op.op_type for op in ops).most_common()),
        op_count=len(ops),
        param_count=len(params),
        param_bytes=sum(p.nbytes for p in params.values()),
        batch=cost.batch,
        flops_per_sample=cost.flops_per_sample,
        peak_activation_bytes_per_sample=cost.peak_activation_bytes_per_sample,
        largest_tensor_bytes=cost.largest_tensor_bytes,
        data_dependent=cost.data_dependent,
        batchable=proof.batchable,
        batch_coupling=proof.coupling,
        warnings=tuple(d for d in out if d.severity == Severity.WARNING),
    )


def _with_fixed_dims(
    feeds: Mapping[str, TensorType], binding: Binding | None
) -> dict[str, TensorType]:
    if binding is None:
        return dict(feeds)
    return {
        name: TensorType(
            t.dtype,
            tuple(binding.fixed.get(Place(name, axis), d) for axis, d in enumerate(t.shape)),
        )
        for name, t in feeds.items()
    }


def _plain_signature(feeds: Mapping[str, TensorType]) -> dict[str, tuple[int | str, ...]]:
    """The symbols of a program whose dims needed no solving: B, D1, D2, ... (dims.py)."""
    return initial_binding(feeds, Policy()).signature(feeds)


def _in_feed_order(
    constraints: Sequence[DimConstraint], feeds: Mapping[str, TensorType]
) -> tuple[DimConstraint, ...]:
    order = {name: i for i, name in enumerate(feeds)}
    return tuple(sorted(constraints, key=lambda c: (order[c.feed], c.axis)))
