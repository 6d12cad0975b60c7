"""Symbolic dims: each unknown (-1) dim of a feed is a symbol, and the program's own ops say what
sizes it may take.

Budgets are computed with every unknown dim bound to a number: the batch symbol `B` (the
unknown dim 0 of the feeds) at the policy's max_batch, every other symbol (`D1`, `D2`, ... in
feed order) at max_dynamic_dim or at the size the upload declares for it (`--dim D1=128`).
Where that binding contradicts the program (a state input [-1, -1, -1] split into 3 along
axis 0, which is really [3, B, 256]), `solve` finds which dim the failing op objects to and the
sizes it accepts, by running the same concrete inference at other sizes of that one dim:

- accepted only at one size: the dim is fixed (`equal`), or, where that size is another
  symbol's, the two are one symbol (unified; checked by moving both to another size);
- accepted at the multiples of a number (`divisible`), up to a size (`at_most`), from a size
  on (`at_least`), or at one size and 1 (`broadcast`): the constraint is recorded and the dim
  bound to the largest size it allows within its bound.

The constraints found are kept with the program and checked on every request before it runs
(executor/runtime_checks.py); a dim no size satisfies is a contradiction, reported with the op
and the dims tried. Only a program the plain binding refuses is solved: the budgets of the
others are computed exactly as before.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from validator.bind import BoundOp
from validator.infer import FEED, infer_op
from validator.ops import GraphError, TensorType
from validator.policy import Policy

BATCH: Final = "B"
# How a constraint names the op that imposes it (a PIR program's own numbers: validate.py).
OpLabel = Callable[[BoundOp], str]


def legacy_op_label(op: BoundOp) -> str:
    """The op as the program it was bound from numbers it: block, index, type."""
    return f"block {op.block}, op {op.index} ({op.op_type})"


# Rounds of the search (each fixes or constrains one dim) and concrete inferences spent in all:
# a bound on the work a program the plain binding refuses may cost.
MAX_ROUNDS: Final = 24
MAX_PROBES: Final = 3000
# Op inferences a solve remembers (_Solver._infer): ~300 bytes each.
_MEMO_ENTRIES: Final = 100_000
# Sizes always tried besides the program's own fixed dims (and one either side of each).
_SMALL: Final = tuple(range(1, 17))
_ROUND: Final = (24, 32, 48, 64, 96, 100, 128, 192, 256, 384, 512, 1000, 1024)


@dataclass(frozen=True, slots=True, order=True)
class Place:
    """One unknown dim of a feed."""

    feed: str
    axis: int

    def __str__(self) -> str:
        return f"{self.feed} dim {self.axis}"


class Kind(enum.StrEnum):
    EQUAL = "equal"
    DIVISIBLE = "divisible"
    AT_MOST = "at_most"
    AT_LEAST = "at_least"
    BROADCAST = "broadcast"  # the size or 1 (an elementwise op's broadcasting)


@dataclass(frozen=True, slots=True)
class Constraint:
    kind: Kind
    value: int

    def holds(self, size: int) -> bool:
        if self.kind == Kind.EQUAL:
            return size == self.value
        if self.kind == Kind.DIVISIBLE:
            return size % self.value == 0
        if self.kind == Kind.AT_MOST:
            return size <= self.value
        if self.kind == Kind.BROADCAST:
            return size in (1, self.value)
        return size >= self.value

    def text(self) -> str:
        return {
            Kind.EQUAL: f"must be {self.value}",
            Kind.DIVISIBLE: f"must be divisible by {self.value}",
            Kind.AT_MOST: f"must be at most {self.value}",
            Kind.AT_LEAST: f"must be at least {self.value}",
            Kind.BROADCAST: f"must be {self.value} or 1",
        }[self.kind]

    def largest_within(self, bound: int) -> int | None:
        """The largest size up to `bound` that satisfies it (what budgets are computed at)."""
        if self.kind in (Kind.EQUAL, Kind.BROADCAST):
            return self.value
        if self.kind == Kind.AT_LEAST:
            return self.value if self.value <= bound else None
        if self.kind == Kind.DIVISIBLE:
            return bound - bound % self.value or None
        return min(bound, self.value)


@dataclass(frozen=True, slots=True)
class DimConstraint:
    """A constraint on one feed dim, kept with the program and checked on every request."""

    feed: str
    axis: int
    constraint: Constraint
    reason: str  # the op that imposes it, as its diagnostic says

    def violation(self, size: int) -> str | None:
        if self.constraint.holds(size):
            return None
        return f"{self.feed} dim {self.axis} {self.constraint.text()} ({self.reason}), got {size}"

    def to_json(self) -> dict[str, Any]:
        return {
            "input": self.feed,
            "dim": self.axis,
            "kind": str(self.constraint.kind),
            "value": self.constraint.value,
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class Classified:
    """What `classify` made of the sizes one dim accepts."""

    constraint: Constraint | None  # None: every size tried is accepted, or none is
    accepted: tuple[int, ...]
    tried: tuple[int, ...]

    @property
    def free(self) -> bool:
        return self.constraint is None and self.accepted == self.tried

    @property
    def unsatisfiable(self) -> bool:
        return not self.accepted

    @property
    def unclassified(self) -> bool:
        return self.constraint is None and not self.free and bool(self.accepted)


def candidate_sizes(context: Iterable[int], limit: int) -> tuple[int, ...]:
    """Sizes to try for one dim: small ones, round ones, and each fixed dim of the program with
    its neighbours and first multiples (a dim tied to a fixed one is found at it; a cap at a
    fixed one, one above)."""
    sizes = set(_SMALL) | set(_ROUND)
    for d in context:
        if d > 1:
            sizes.update((d - 1, d, d + 1, 2 * d, 3 * d))
    return tuple(sorted(s for s in sizes if 1 <= s <= limit))


def classify(accepts: Callable[[int], bool], tried: Sequence[int]) -> Classified:
    """The constraint that says which of `tried` are accepted: one size, the multiples of a
    number, the sizes up to one, or from one on; None when all or none are accepted, or when no
    such rule describes them (unclassified)."""
    accepted = tuple(s for s in tried if accepts(s))
    found = _rule(accepted, tuple(tried))
    return Classified(found, accepted, tuple(tried))


def _rule(accepted: tuple[int, ...], tried: tuple[int, ...]) -> Constraint | None:
    if not accepted or accepted == tried:
        return None
    if len(accepted) == 1:
        return Constraint(Kind.EQUAL, accepted[0])
    if len(accepted) == 2 and accepted[0] == 1:
        return Constraint(Kind.BROADCAST, accepted[1])
    g = math.gcd(*accepted)
    if g > 1 and accepted == tuple(s for s in tried if s % g == 0):
        return Constraint(Kind.DIVISIBLE, g)
    if accepted == tuple(s for s in tried if s <= accepted[-1]):
        return Constraint(Kind.AT_MOST, accepted[-1])
    if accepted == tuple(s for s in tried if s >= accepted[0]):
        return Constraint(Kind.AT_LEAST, accepted[0])
    return None


# --- binding -----------------------------------------------------------------------------------


@dataclass
class Binding:
    """The size each unknown feed dim is bound to, the symbol it stands for, its bound, and the
    constraints recorded on it."""

    values: dict[Place, int]
    names: dict[Place, str]
    bounds: dict[str, int]  # by symbol
    constraints: list[DimConstraint] = field(default_factory=list)
    fixed: dict[Place, int] = field(default_factory=dict)

    def feeds(self, feeds: Mapping[str, TensorType]) -> dict[str, TensorType]:
        out = {}
        for name, t in feeds.items():
            dims = tuple(
                self.values.get(Place(name, axis), d) if d < 0 else d
                for axis, d in enumerate(t.shape)
            )
            out[name] = TensorType(t.dtype, dims, t.value)
        return out

    @property
    def batch(self) -> int:
        sizes = [self.values[p] for p in self.places_of(BATCH)]
        return sizes[0] if sizes else 1

    def places_of(self, symbol: str) -> list[Place]:
        """The dims `symbol` stands for: a dim a constraint fixed (a state input's dim 0 that
        was the batch's until a split into 3 fixed it) no longer moves with it."""
        return [p for p, n in self.names.items() if n == symbol and p not in self.fixed]

    def signature(self, feeds: Mapping[str, TensorType]) -> dict[str, tuple[int | str, ...]]:
        """Each feed's dims with its symbols named and fixed dims filled in."""
        return {
            name: tuple(
                d
                if d >= 0
                else self.fixed.get(Place(name, axis), self.names.get(Place(name, axis), "?"))
                for axis, d in enumerate(t.shape)
            )
            for name, t in feeds.items()
        }


class DimDeclarationError(ValueError):
    """An upload's `--dim NAME=SIZE` names no symbol, or the batch, or a size out of range."""


class DimSyntaxError(DimDeclarationError):
    """Declarations that are not `NAME=SIZE[,NAME=SIZE...]` (refused before any validation)."""


DECLARATION_SYNTAX: Final = "NAME=SIZE[,NAME=SIZE...]"
# A program has at most a few dozen unknown dims; more declarations than this are no program's.
MAX_DECLARATIONS: Final = 64
_MAX_NAME_CHARS: Final = 256
_MAX_SIZE_DIGITS: Final = 19  # int() of a longer digit string is needlessly slow; none fits


def parse_dim_declarations(texts: Iterable[str]) -> dict[str, int]:
    """`NAME=SIZE` declarations, several per text separated by commas (`D1=128,audio.1=64`):
    `graphgate check --dim`, `graphgate upload --dim` and the upload's `dims` form field all
    read them here. NAME is a symbol (`D1`) or FEED.AXIS; whether it names an unknown dim of
    the program, and whether SIZE is within the policy, is checked by validation (`_declare`).
    """
    declared: dict[str, int] = {}
    for text in texts:
        for item in text.split(","):
            name, size = _one_declaration(item.strip())
            if name in declared:
                raise DimSyntaxError(f"expected each NAME once, got {name!r} twice")
            declared[name] = size
            if len(declared) > MAX_DECLARATIONS:
                raise DimSyntaxError(f"expected at most {MAX_DECLARATIONS} declarations, got more")
    return declared


def _one_declaration(item: str) -> tuple[str, int]:
    name, sep, size = item.partition("=")
    name, size = name.strip(), size.strip()
    shown = item if len(item) <= 80 else item[:77] + "..."
    well_formed = (
        sep
        and name
        and len(name) <= _MAX_NAME_CHARS
        and not any(c.isspace() for c in name)
        and size.isascii()
        and size.isdigit()
        and len(size) <= _MAX_SIZE_DIGITS
    )
    if not well_formed:
        raise DimSyntaxError(f"expected {DECLARATION_SYNTAX} (SIZE a whole number), got {shown!r}")
    return name, int(size)


def initial_binding(
    feeds: Mapping[str, TensorType], policy: Policy, declared: Mapping[str, int] | None = None
) -> Binding:
    """B at max_batch for every unknown dim 0, D1, D2, ... (in feed order) at max_dynamic_dim
    or the declared size (by symbol name, or `feed.axis`), each declaration an at-most
    constraint checked at run time."""
    values: dict[Place, int] = {}
    names: dict[Place, str] = {}
    bounds = {BATCH: policy.max_batch}
    count = 0
    for name, t in feeds.items():
        for axis, d in enumerate(t.shape):
            if d >= 0:
                continue
            place = Place(name, axis)
            if axis == 0:
                names[place], values[place] = BATCH, policy.max_batch
                continue
            count += 1
            symbol = f"D{count}"
            names[place], values[place] = symbol, policy.max_dynamic_dim
            bounds[symbol] = policy.max_dynamic_dim
    binding = Binding(values, names, bounds)
    for key, size in (declared or {}).items():
        _declare(binding, key, size, policy)
    return binding


def _declare(binding: Binding, key: str, size: int, policy: Policy) -> None:
    place_names = {f"{p.feed}.{p.axis}": n for p, n in binding.names.items()}
    symbol = place_names.get(key, key)
    if symbol == BATCH:
        raise DimDeclarationError(
            f"declared {key}={size}: expected a dim other than the batch, got the batch (its "
            f"bound is the policy's max_batch, {policy.max_batch})"
        )
    if symbol not in binding.bounds:
        known = sorted(set(binding.bounds) - {BATCH})
        raise DimDeclarationError(
            f"declared {key}={size}: expected one of {known} or FEED.AXIS for an unknown dim, "
            f"got {key!r}"
        )
    if not 1 <= size <= policy.max_dim:
        raise DimDeclarationError(
            f"declared {key}={size}: expected a size in 1..{policy.max_dim}, got {size}"
        )
    binding.bounds[symbol] = size
    for place in binding.places_of(symbol):
        binding.values[place] = size
        binding.constraints.append(
            DimConstraint(
                place.feed,
                place.axis,
                Constraint(Kind.AT_MOST, size),
                f"{symbol} declared at upload",
            )
        )


# --- solving -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Contradiction:
    """No size of the dims tried satisfies an op; `message` names the op, the dims and why."""

    op: BoundOp
    message: str


class _OutOfProbes(Exception):
    pass


@dataclass
class _Solver:
    ops: Sequence[BoundOp]
    feeds: Mapping[str, TensorType]
    params: Mapping[str, TensorType]
    context: tuple[int, ...]  # the program's own fixed dims
    label: OpLabel = legacy_op_label
    probes: int = 0
    _feeding_memo: dict[int, list[int]] = field(default_factory=dict)
    _inferred: dict[tuple[Any, ...], dict[str, TensorType]] = field(default_factory=dict)

    def first_failure(
        self, values: Mapping[Place, int], through: int | None = None
    ) -> tuple[int, GraphError] | None:
        """Where concrete inference with the feeds' unknown dims at `values` first fails; with
        `through`, whether op `through` itself and the ops it reads from run (see _feeding)."""
        self.probes += 1
        if self.probes > MAX_PROBES:
            raise _OutOfProbes
        types: dict[str, TensorType] = {**self.params}
        for name, t in self.feeds.items():
            dims = tuple(
                values.get(Place(name, a), d) if d < 0 else d for a, d in enumerate(t.shape)
            )
            types[name] = TensorType(t.dtype, dims, t.value)
        positions = range(len(self.ops)) if through is None else self._feeding(through)
        for position in positions:
            try:
                types.update(self._infer(position, types))
            except GraphError as e:
                return position, e
        return None

    def _infer(self, position: int, types: Mapping[str, TensorType]) -> dict[str, TensorType]:
        """infer_op, remembered: the same op over the same input types infers the same, and
        a probe moves one dim, leaving the ops it does not reach (weights, constants, other
        feeds) as they were. Not for a sub-block's op (its body reads more than the op lists)
        nor a feed (it yields what the probe's values say); at most _MEMO_ENTRIES (a hostile
        program's 3,000 probes over 10,000 ops would otherwise hold them all)."""
        op = self.ops[position]
        if op.blocks or op.op_def.op_type == FEED:
            return infer_op(op, types)
        key = (position, *(types.get(name) for name in op.reads()))
        inferred = self._inferred.get(key)
        if inferred is None:
            inferred = infer_op(op, types)
            if len(self._inferred) < _MEMO_ENTRIES:
                self._inferred[key] = inferred
        return inferred

    def _feeding(self, position: int) -> list[int]:
        """The positions of the op at `position` and of every op before it that its inputs come
        from, in order: a probe asks what this op requires of a dim, so the ops it does not read
        from are skipped (they are most of a long program's, and the probes are most of a
        solve's time). A sub-block reads outer tensors its op does not list: with one among
        them, every op before `position` is kept."""
        kept = self._feeding_memo.get(position)
        if kept is None:
            if any(op.blocks for op in self.ops[: position + 1]):
                kept = list(range(position + 1))
            else:
                needed = set(self.ops[position].reads())
                kept = [position]
                for index in range(position - 1, -1, -1):
                    op = self.ops[index]
                    if needed.intersection(op.writes()):
                        kept.append(index)
                        needed.update(op.reads())
                kept.reverse()
            self._feeding_memo[position] = kept
        return kept

    def passes(self, values: Mapping[Place, int], position: int) -> bool:
        return self.first_failure(values, through=position) is None


def solve(
    ops: Sequence[BoundOp],
    feeds: Mapping[str, TensorType],
    params: Mapping[str, TensorType],
    context: Iterable[int],
    binding: Binding,
    label: OpLabel = legacy_op_label,
) -> Binding | Contradiction:
    """The binding with the dims the program constrains fixed, unified or bounded so that
    inference runs through; or the contradiction that stops it. `label` names the op a
    constraint comes from, in its reason."""
    solver = _Solver(ops, feeds, params, tuple(sorted(set(context))), label)
    try:
        for _ in range(MAX_ROUNDS):
            failure = solver.first_failure(binding.values)
            if failure is None:
                return binding
            position, error = failure
            if not _one_round(solver, binding, position):
                return _contradiction(binding, ops[position], error)
    except _OutOfProbes:
        pass
    failure = solver.first_failure(binding.values) if solver.probes <= MAX_PROBES else None
    op = ops[failure[0]] if failure else ops[0]
    return Contradiction(
        op, f"expected the unknown dims to be solved within {MAX_PROBES} inferences, got more"
    )


def _contradiction(binding: Binding, op: BoundOp, error: GraphError) -> Contradiction:
    places = ", ".join(f"{p} ({binding.names[p]})" for p in sorted(binding.values))
    found = "; ".join(f"{c.feed} dim {c.axis} {c.constraint.text()}" for c in binding.constraints)
    tail = f" (with {found})" if found else ""
    return Contradiction(
        op,
        f"{error}: no size of the unknown dims [{places}] up to their bounds satisfies this op"
        f"{tail}",
    )


def _one_round(solver: _Solver, binding: Binding, position: int) -> bool:
    """Finds what the op at `position` requires of the unknown dims and records it: first each
    dim (or symbol) alone, every other unfixed dim left unknown (-1) so that only the checks
    that involve this one apply; then pairs of symbols the op wants equal."""
    for unit in _units(binding):
        symbol = binding.names[unit[0]]
        bound = binding.bounds[symbol]
        own = [c.constraint for c in binding.constraints if Place(c.feed, c.axis) in unit]
        sizes = [s for s in candidate_sizes(solver.context, bound) if all(c.holds(s) for c in own)]
        accepts = _accepts(solver, binding, unit, position)
        if all(accepts(s) for s in _detection(sizes, bound)):
            continue  # no check of this op involves this dim alone
        result = classify(accepts, sizes)
        if result.free:
            continue
        constraint = result.constraint
        if constraint is None:  # accepted at sizes no one rule describes: the largest
            if not result.accepted:
                continue
            constraint = Constraint(Kind.EQUAL, result.accepted[-1])
        _record(binding, unit, constraint, bound, solver.ops[position], solver.label)
        return True
    return _unify_pair(solver, binding, position)


def _units(binding: Binding) -> list[list[Place]]:
    """What one probe moves: each unfixed dim alone, then each symbol's dims together."""
    free = [p for p in sorted(binding.values) if p not in binding.fixed]
    symbols = sorted({binding.names[p] for p in free})
    together = [binding.places_of(s) for s in symbols if len(binding.places_of(s)) > 1]
    return [[p] for p in free] + together


def _isolated(binding: Binding, moved: Mapping[Place, int]) -> dict[Place, int]:
    """Fixed dims at their sizes, `moved` at theirs, every other unknown dim unknown."""
    values = {p: binding.fixed.get(p, -1) for p in binding.values}
    values.update(moved)
    return values


def _accepts(
    solver: _Solver, binding: Binding, unit: list[Place], position: int
) -> Callable[[int], bool]:
    return lambda size: solver.passes(_isolated(binding, dict.fromkeys(unit, size)), position)


def _detection(sizes: Sequence[int], bound: int) -> list[int]:
    """A few sizes that tell a dim no check involves from one that some check does: the
    bound and one below it (a divisibility, a cap), small ones (a fixed size, a minimum), and
    the two smallest and largest of the sizes its constraints so far allow."""
    allowed = set(sizes)
    picks = [s for s in (bound, bound - 1, 1, 2, 3, 7, 16) if s in allowed]
    return list(dict.fromkeys([*picks, *sizes[:2], *sizes[-2:]]))


def _unify_pair(solver: _Solver, binding: Binding, position: int) -> bool:
    """Two symbols the op accepts at one common size and refuses at two different ones are
    one symbol (a state input's dim 1 and the batch): the second joins the first (B first)."""
    symbols = sorted(
        {binding.names[p] for p in binding.values if p not in binding.fixed},
        key=lambda n: (n != BATCH, n),
    )
    for i, first in enumerate(symbols):
        for second in symbols[i + 1 :]:
            size = min(binding.bounds[first], binding.bounds[second])
            if size < 2:
                continue
            a, b = binding.places_of(first), binding.places_of(second)
            same = solver.passes(_isolated(binding, dict.fromkeys(a + b, size)), position)
            apart = {**dict.fromkeys(a, size), **dict.fromkeys(b, size - 1)}
            if same and not solver.passes(_isolated(binding, apart), position):
                for place in b:
                    binding.names[place] = first
                    binding.values[place] = binding.values[a[0]]
                return True
    return False


def _record(
    binding: Binding,
    unit: list[Place],
    constraint: Constraint,
    bound: int,
    op: BoundOp,
    label: OpLabel,
) -> None:
    size = constraint.largest_within(bound)
    if size is None:
        size = constraint.value
    reason = f"required by {label(op)}"
    symbol = binding.names[unit[0]]
    if constraint.kind != Kind.EQUAL and len(unit) < len(binding.places_of(symbol)):
        # Taken apart from the symbol it shared (an unknown dim 0 that is no batch).
        fresh = f"D{len(binding.bounds)}"
        binding.bounds[fresh] = bound
        for place in unit:
            binding.names[place] = fresh
    for place in unit:
        binding.values[place] = size
        if constraint.kind == Kind.EQUAL:
            binding.fixed[place] = size
            earlier = [
                c for c in binding.constraints if (c.feed, c.axis) == (place.feed, place.axis)
            ]
            binding.constraints[:] = [c for c in binding.constraints if c not in earlier]
            ops = [c.reason.removeprefix("required by ") for c in earlier if c.reason != reason]
            if ops:  # the ops that constrained it before, named too
                reason = f"required by {', '.join(ops)} and {reason.removeprefix('required by ')}"
        binding.constraints.append(DimConstraint(place.feed, place.axis, constraint, reason))


def fixed_dims(ops: Sequence[BoundOp], params: Mapping[str, TensorType]) -> set[int]:
    """Every known dim of the parameters and of the tensors inference typed at each op."""
    dims = {d for t in params.values() for d in t.shape}
    for op in ops:
        for t in op.types_out.values():
            dims.update(t.shape)
    return dims
