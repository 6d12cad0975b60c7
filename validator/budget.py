"""Resource budgets: re-infers the program at the policy's max batch and measures it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from graph_proto.types import numel
from validator.bind import BoundOp
from validator.diagnostics import Code, Diagnostic, Severity
from validator.dims import (
    Binding,
    Contradiction,
    OpLabel,
    fixed_dims,
    initial_binding,
    legacy_op_label,
    solve,
)
from validator.infer import gather_inputs, infer_op, scope_over
from validator.ops import GraphError, TensorType
from validator.ops.control import WHILE_OP
from validator.policy import Policy

# Ops whose output dims may be known only once a branch or loop has run: such a dim is not
# sized by input data (no feed value fixes it); its tensor is bounded by the branch and loop
# figures counted here, and checked against the actual output after the run.
_BRANCH_VALUE_OPS = frozenset({"select_input"})


@dataclass(frozen=True, slots=True)
class Cost:
    """Figures at `batch`; per-sample figures divide by it."""

    batch: int
    flops: int
    peak_activation_bytes: int
    largest_tensor_bytes: int
    # Outputs whose size comes from input data (range bounds, a fill shape fed by the user):
    # their bytes are checked per request by the executor, before it runs anything.
    data_dependent: tuple[str, ...] = ()
    # The unknown feed dims' symbols, sizes and constraints the figures were taken at, where
    # the program constrains them (validator/dims.py) or the upload declared sizes.
    dims: Binding | None = None

    @property
    def flops_per_sample(self) -> int:
        return self.flops // self.batch

    @property
    def peak_activation_bytes_per_sample(self) -> int:
        return self.peak_activation_bytes // self.batch


def bounded_feeds(
    feeds: Mapping[str, TensorType],
    policy: Policy,
    *,
    batch_only: bool = False,
    dynamic: int | None = None,
) -> tuple[dict[str, TensorType], int]:
    """Feed types with -1 dims bound: the first dim to max_batch, the others to `dynamic`
    (max_dynamic_dim by default), or left unknown with `batch_only`."""
    batch = 1
    size = policy.max_dynamic_dim if dynamic is None else dynamic
    bounded: dict[str, TensorType] = {}
    for name, t in feeds.items():
        dims = list(t.shape)
        for axis, d in enumerate(dims):
            if d < 0 and axis == 0:
                dims[axis], batch = policy.max_batch, policy.max_batch
            elif d < 0 and not batch_only:
                dims[axis] = size
        bounded[name] = TensorType(t.dtype, tuple(dims))
    return bounded, batch


# How many sizes the program pins a dynamic dim to are tried, largest first (one inference
# pass each), before the figures fall back to upper bounds.
_PINNED_TRIES = 6


_FINAL = frozenset({Code.TENSOR_TOO_LARGE, Code.SUB_BLOCK_DATA_DEPENDENT})


class _Rejected(Exception):
    """Inference at the bounds failed; carries the diagnostic to report."""

    def __init__(self, diagnostic: Diagnostic) -> None:
        super().__init__(diagnostic.message)
        self.diagnostic = diagnostic


# Rejections at the plain binding that another binding of the unknown dims may lift.
_NOT_SOLVABLE = frozenset({Code.TENSOR_TOO_LARGE, Code.SUB_BLOCK_DATA_DEPENDENT})


def measure(
    ops: Sequence[BoundOp],
    feeds: Mapping[str, TensorType],
    params: Mapping[str, TensorType],
    fetches: Sequence[str],
    policy: Policy,
    out: list[Diagnostic],
    declared: Mapping[str, int] | None = None,
    label: OpLabel = legacy_op_label,
) -> Cost | None:
    """Infers at the bounds and checks each budget; None when inference itself fails there.

    `declared`: sizes the upload gives unknown dims (validator/dims.py names them), each one's
    bound and a run-time constraint. Where the bounds contradict the program (a split into 3
    at batch 32, a weight of 4 rows), its own ops are asked which sizes they take
    (dims.solve): the figures are then taken at the sizes found, and the constraints kept for
    the run-time check, each naming its op as `label` does. Only where no size is found are
    the figures taken at a fallback binding (_measure_fallback), with a warning."""
    binding = initial_binding(feeds, policy, declared)
    attempt: list[Diagnostic] = []
    cost = _measure_binding(ops, feeds, params, fetches, policy, attempt, binding)
    errors = [d for d in attempt if d.severity == Severity.ERROR]
    if cost is not None or not errors:
        out.extend(attempt)
        return cost
    declaring = bool(binding.constraints)  # (solve records its constraints on `binding`)
    # Why the sizes the ops were asked for fail, when they were asked: what a refusal says.
    unsolved: list[Diagnostic] | None = None
    if binding.values and errors[0].code not in _NOT_SOLVABLE:
        solved = solve(ops, feeds, params, fixed_dims(ops, params), binding, label)
        unsolved = []
        if isinstance(solved, Contradiction):
            unsolved.append(_diag(errors[0].code, solved.op, solved.message))
        else:
            cost = _measure_binding(ops, feeds, params, fetches, policy, unsolved, solved)
            if cost is not None:
                out.extend(unsolved)
                return cost
    if declaring:  # declared sizes are the bounds: no other binding is tried
        out.extend(attempt if unsolved is None else unsolved)
        return None
    fallback: list[Diagnostic] = []
    cost = _measure_fallback(ops, feeds, params, fetches, policy, fallback, errors[0])
    out.extend(fallback if cost is not None or unsolved is None else unsolved)
    return cost


def _measure_binding(
    ops: Sequence[BoundOp],
    feeds: Mapping[str, TensorType],
    params: Mapping[str, TensorType],
    fetches: Sequence[str],
    policy: Policy,
    out: list[Diagnostic],
    binding: Binding,
) -> Cost | None:
    """The figures with every unknown dim at its size in `binding`."""
    try:
        cost = _measure_at(
            ops, binding.feeds(feeds), binding.batch, params, fetches, policy, exact_dims=True
        )
    except _Rejected as rejected:
        out.append(rejected.diagnostic)
        return None
    return _finish(replace(cost, dims=binding), policy, out)


def _measure_fallback(
    ops: Sequence[BoundOp],
    feeds: Mapping[str, TensorType],
    params: Mapping[str, TensorType],
    fetches: Sequence[str],
    policy: Policy,
    out: list[Diagnostic],
    first: Diagnostic,
) -> Cost | None:
    """The figures when no upload declaration binds the dims and neither the policy's bounds
    (max_batch, max_dynamic_dim) nor the sizes the ops were asked for run through (`first`:
    the rejection at the bounds).

    Where the program itself pins the dynamic dims (a fixed [1, 1, 128, 128] causal mask
    sliced by a length the solver could not bound), they are bound to the largest size the
    program takes and contradicts one above (see _pinned_size). Failing that (a feed of
    [-1, -1, 5, 5] into a layer of 4 channels), the figures are taken with only the batch
    bound, each remaining unknown dim counted at max_dynamic_dim (an upper bound). A warning
    says which.
    """
    exact, batch = bounded_feeds(feeds, policy)
    size = None if exact == feeds else _pinned_size(ops, feeds, params, fetches, policy)
    if size is None and (first.code in _FINAL or exact == feeds):
        out.append(first)
        return None
    if size is not None:
        bounded, batch = bounded_feeds(feeds, policy, dynamic=size)
        warning = Diagnostic(
            code=Code.BUDGET_PINNED_DIMS,
            severity=Severity.WARNING,
            message=f"cost figures are taken with the dynamic dims at {size}, the size the program pins them to (at {policy.max_dynamic_dim}: {first.message})",
        )
    else:
        bounded = bounded_feeds(feeds, policy, batch_only=True)[0]
        warning = Diagnostic(
            code=Code.BUDGET_UPPER_BOUND,
            severity=Severity.WARNING,
            message=f"cost figures are upper bounds: binding every dynamic dim to {policy.max_dynamic_dim} contradicts the program ({first.message})",
        )
    return _measure_instead(
        ops,
        bounded,
        batch,
        params,
        fetches,
        policy,
        out,
        exact_dims=size is not None,
        warning=warning,
    )


def _measure_instead(
    ops: Sequence[BoundOp],
    bounded: Mapping[str, TensorType],
    batch: int,
    params: Mapping[str, TensorType],
    fetches: Sequence[str],
    policy: Policy,
    out: list[Diagnostic],
    *,
    exact_dims: bool,
    warning: Diagnostic,
) -> Cost | None:
    """The figures at a fallback binding, with `warning` saying which binding; or its rejection."""
    try:
        cost = _measure_at(ops, bounded, batch, params, fetches, policy, exact_dims=exact_dims)
    except _Rejected as rejected:
        out.append(rejected.diagnostic)
        return None
    out.append(warning)
    return _finish(cost, policy, out)


def _pinned_size(
    ops: Sequence[BoundOp],
    feeds: Mapping[str, TensorType],
    params: Mapping[str, TensorType],
    fetches: Sequence[str],
    policy: Policy,
) -> int | None:
    """The largest size the program pins its dynamic dims to, or None.

    Candidates are the sizes of the program's own fixed dims below max_dynamic_dim (the 128 of
    a position table or a mask), largest first: one is taken where inference with every dynamic
    dim one above it fails with a contradiction (no larger input runs) and at it does not."""
    candidates = sorted(
        {d for d in fixed_dims(ops, params) if 1 < d < policy.max_dynamic_dim}, reverse=True
    )
    for size in candidates[:_PINNED_TRIES]:
        if not _contradicts(ops, feeds, params, fetches, policy, size + 1):
            return None  # a larger input runs too: the program does not pin this size
        if not _contradicts(ops, feeds, params, fetches, policy, size):
            return size
    return None


def _contradicts(
    ops: Sequence[BoundOp],
    feeds: Mapping[str, TensorType],
    params: Mapping[str, TensorType],
    fetches: Sequence[str],
    policy: Policy,
    size: int,
) -> bool:
    """Whether inference fails with every dynamic dim at `size` (caps aside: only whether the
    program takes that size is asked; the figures are checked once the size is chosen)."""
    bounded, batch = bounded_feeds(feeds, policy, dynamic=size)
    try:
        _measure_at(ops, bounded, batch, params, fetches, policy, caps=False)
    except _Rejected:
        return True
    return False


def _finish(cost: Cost, policy: Policy, out: list[Diagnostic]) -> Cost:
    """Warns of data-dependent sizes and checks the figures against the policy."""
    if cost.data_dependent:
        shown = ", ".join(repr(n) for n in cost.data_dependent[:5])
        more = f" and {len(cost.data_dependent) - 5} more" if len(cost.data_dependent) > 5 else ""
        out.append(
            Diagnostic(
                code=Code.DATA_DEPENDENT_SHAPE,
                severity=Severity.WARNING,
                message=f"the sizes of {shown}{more} come from input data; each request is checked against the tensor byte cap before it runs",
            )
        )
    _check(cost, policy, out)
    return cost


def _measure_at(
    ops: Sequence[BoundOp],
    bounded: Mapping[str, TensorType],
    batch: int,
    params: Mapping[str, TensorType],
    fetches: Sequence[str],
    policy: Policy,
    *,
    exact_dims: bool = False,
    caps: bool = True,
) -> Cost:
    """With `exact_dims`, every feed dim is bound, so a dim still unknown after an op was computed
    from the data itself (range bounds, a fill shape, an expand target fed by the user): no
    static budget holds such a tensor, so it is recorded for the run-time check (threats.md 3.3).
    Without `caps`, only whether the program takes these sizes is asked."""
    data_dependent: list[str] = []
    by_control_flow: set[str] = set()
    types: dict[str, TensorType] = {**params, **bounded}
    last_use = _last_use(ops, fetches)
    # NOTE: feeds become live when their feed op runs (it is one of `ops`), not before.
    live = peak = largest = flops = 0
    for op in ops:
        try:
            inferred = infer_op(op, types)
        except GraphError as e:
            raise _Rejected(_diag(e.code, op, f"at batch {batch}: {e}")) from None
        types.update(inferred)
        unknown = [name for name, t in inferred.items() if sized_by_data(t)]
        if _after_control_flow(op, by_control_flow):
            by_control_flow.update(unknown)
        elif exact_dims:
            data_dependent.extend(unknown)
        sizes = [_bounded_bytes(t, policy) for t in inferred.values()]
        if caps:
            _check_tensors(op, inferred, sizes, policy, f" at batch {batch}")
        op_flops, transient = _op_cost(
            op, types, inferred, policy, exact_dims=exact_dims, caps=caps
        )
        flops += op_flops
        live += sum(sizes)
        # A sub-block's own tensors live while it runs: counted on top, all at once.
        peak, largest = max(peak, live + transient), max([largest, *sizes])
        live -= sum(
            _bounded_bytes(types[n], policy) for n in set(op.reads()) | set(inferred)
            if last_use.get(n, -1) <= op.index and n in types and n not in params
        )  # fmt: skip
    return Cost(batch, flops, peak, largest, tuple(data_dependent))


def _after_control_flow(op: BoundOp, by_control_flow: set[str]) -> bool:
    return (
        bool(op.blocks)
        or op.op_type in _BRANCH_VALUE_OPS
        or not by_control_flow.isdisjoint(op.reads())
    )


def _check_tensors(
    op: BoundOp,
    inferred: Mapping[str, TensorType],
    sizes: Sequence[int],
    policy: Policy,
    where: str,
) -> None:
    for (name, t), size in zip(inferred.items(), sizes, strict=True):
        problem = over_cap(t, size, policy)
        if problem is not None:
            shown = f"output {name!r} {t.dtype.label}{list(t.shape)}{where}"
            raise _Rejected(_diag(Code.TENSOR_TOO_LARGE, op, f"{shown}: {problem}"))


def _op_cost(
    op: BoundOp,
    types: Mapping[str, TensorType],
    inferred: Mapping[str, TensorType],
    policy: Policy,
    *,
    exact_dims: bool,
    caps: bool = True,
) -> tuple[int, int]:
    """FLOPs of the op, and the bytes its sub-block's own tensors hold while it runs."""
    if not op.blocks:
        return _op_flops(op, types, inferred, policy), 0
    (body,) = op.blocks
    # NOTE: `types` already holds a while's loop vars as merged over every iteration.
    scope = scope_over(types)
    flops = transient = 0
    for inner in body:
        try:
            produced = infer_op(inner, scope)
        except GraphError as e:
            raise _Rejected(_diag(e.code, inner, f"inside block {inner.block}: {e}")) from None
        if exact_dims:
            _check_sized_by_data(inner, scope, produced)
        scope.update(produced)
        sizes = [_bounded_bytes(t, policy) for t in produced.values()]
        if caps:
            _check_tensors(inner, produced, sizes, policy, f" in block {inner.block}")
        inner_flops, inner_transient = _op_cost(
            inner, scope, produced, policy, exact_dims=exact_dims, caps=caps
        )
        flops += inner_flops
        transient += sum(sizes) + inner_transient
    # A loop runs up to its bound, plus the one extra check of the condition the lowering makes.
    runs = (policy.max_loop_trips or 0) + 1 if op.op_type == WHILE_OP else 1
    return flops * runs, transient


def _check_sized_by_data(
    op: BoundOp, types: Mapping[str, TensorType], produced: Mapping[str, TensorType]
) -> None:
    """Every feed dim is bound: an unknown output of known inputs is sized by their values.
    (Unknown inputs carry dims a loop or branch left open, checked where they arose.)"""
    if not all(types[name].known for name in op.reads() if name in types):
        return
    for name, t in produced.items():
        if sized_by_data(t):
            message = f"output {name!r} {t.dtype.label}{list(t.shape)} in block {op.block} is sized by input data; expected sizes fixed by shapes and constants inside loops and branches"
            raise _Rejected(_diag(Code.SUB_BLOCK_DATA_DEPENDENT, op, message))


def over_cap(t: TensorType, size: int, policy: Policy) -> str | None:
    """Why a tensor of `size` bytes is over the policy's byte or dim cap, or None."""
    if size > policy.max_tensor_bytes:
        return f"expected at most {policy.max_tensor_bytes} bytes, got {size}"
    return dim_over_cap(t, policy)


def dim_over_cap(t: TensorType, policy: Policy) -> str | None:
    """Why a tensor's dims are over the cap, or None. Empty tensors escape the byte cap, so
    without this a chain of tile/concat on a 0-size input grows dims without bound."""
    largest = max(t.shape, default=0)
    if largest > policy.max_dim:
        return f"expected dims <= {policy.max_dim}, got {largest}"
    return None


def _last_use(ops: Sequence[BoundOp], fetches: Sequence[str]) -> dict[str, int]:
    last: dict[str, int] = {}
    for op in ops:
        for name in op.reads():
            last[name] = op.index
    for name in fetches:
        last[name] = 1 << 62  # fetched values live to the end
    return last


def sized_by_data(t: TensorType) -> bool:
    """Some dim is unknown and has no upper bound (TensorType.bound) either."""
    bound = t.bound or (-1,) * t.rank
    return any(d < 0 and b < 0 for d, b in zip(t.shape, bound, strict=True))


def _upper_dims(t: TensorType, policy: Policy) -> tuple[int, ...]:
    """Dims with each unknown one at its bound, or at max_dynamic_dim where it has none."""
    bound = t.bound or (-1,) * t.rank
    return tuple(
        d if d >= 0 else b if b >= 0 else policy.max_dynamic_dim
        for d, b in zip(t.shape, bound, strict=True)
    )


def _bounded_bytes(t: TensorType, policy: Policy) -> int:
    return numel(_upper_dims(t, policy)) * t.dtype.itemsize


def _op_flops(
    op: BoundOp,
    types: Mapping[str, TensorType],
    inferred: Mapping[str, TensorType],
    policy: Policy,
) -> int:
    """The op's cost rule, with any dim still unknown counted at max_dynamic_dim."""
    outputs = [_bound(t, policy) for t in inferred.values()]
    if op.op_def.cost is None:
        return sum(t.numel() for t in outputs)
    inputs = [
        tuple(_bound(t, policy) for t in v)
        if isinstance(v, tuple)
        else None
        if v is None
        else _bound(v, policy)
        for v in gather_inputs(op, types)
    ]
    return int(op.op_def.cost(*inputs, outputs, op.attrs))


def _bound(t: TensorType, policy: Policy) -> TensorType:
    if t.known:
        return t
    return TensorType(t.dtype, _upper_dims(t, policy), t.value)


def _check(cost: Cost, policy: Policy, out: list[Diagnostic]) -> None:
    if cost.peak_activation_bytes_per_sample > policy.max_activation_bytes_per_sample:
        out.append(
            Diagnostic(
                code=Code.ACTIVATIONS_TOO_LARGE,
                message=f"expected at most {policy.max_activation_bytes_per_sample} bytes of live activations per sample, got {cost.peak_activation_bytes_per_sample} (at batch {cost.batch})",
            )
        )
    if cost.flops_per_sample > policy.max_flops_per_sample:
        out.append(
            Diagnostic(
                code=Code.FLOPS_TOO_LARGE,
                message=f"expected at most {policy.max_flops_per_sample} FLOPs per sample, got {cost.flops_per_sample} (at batch {cost.batch})",
            )
        )


def _diag(code: Code, op: BoundOp, message: str) -> Diagnostic:
    return Diagnostic(
        code=code, message=message, block=op.block, op_index=op.index, op_type=op.op_type
    )


@dataclass(frozen=True, slots=True)
class RequestCost:
    """What one request costs at its concrete input shapes (the run-time budget's figures)."""

    batch: int
    flops: int
    peak_activation_bytes: int
    output_bytes: int


def request_cost(
    ops: Sequence[BoundOp],
    feeds: Mapping[str, TensorType],
    params: Mapping[str, TensorType],
    fetches: Sequence[str],
    batch: int,
    policy: Policy,
    output_bytes: int,
) -> RequestCost | str:
    """The request's figures with every feed dim concrete, or why a tensor is over the policy's
    caps at these shapes. Dims still unknown (loops, branches) count at max_dynamic_dim, a
    while at its trip bound: figures are upper bounds, as at upload."""
    try:
        cost = _measure_at(ops, feeds, batch, params, fetches, policy)
    except _Rejected as rejected:
        return rejected.diagnostic.message
    return RequestCost(batch, cost.flops, cost.peak_activation_bytes, output_bytes)


def over_request_budget(cost: RequestCost, policy: Policy) -> str | None:
    """Why a request's figures are over the policy (per sample of its batch, as at upload)."""
    flops_cap = policy.max_flops_per_sample * cost.batch
    if cost.flops > flops_cap:
        return (
            f"expected at most {flops_cap:.1e} FLOPs, got {cost.flops:.1e} for these input "
            f"shapes (batch {cost.batch})"
        )
    bytes_cap = policy.max_activation_bytes_per_sample * cost.batch
    if cost.peak_activation_bytes > bytes_cap:
        return (
            f"expected at most {bytes_cap:.1e} bytes of live activations, got "
            f"{cost.peak_activation_bytes:.1e} for these input shapes (batch {cost.batch})"
        )
    return None
