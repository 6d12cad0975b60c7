"""RuntimeChecks: every check a request gets besides its shapes, in one object the lowering builds.

- Fed indices (a HostIndexCheck each) are checked on the host before the run; indices the graph
  computes from a feed's dims (a ShapeIndexCheck each: position ids) on the request's shapes.
- Loop flags and select_input Masks come back as hidden graph outputs after the fetches: a
  loop that needed more iterations than the policy's bound, or grew a loop var past the byte
  cap, fails the request with a typed error; a Mask says which branch ran, for the exact check
  of the fetches' dims.
- The feed dims the program constrains (validator/dims.py: a state input's dim 0 that a split
  into 3 fixes at 3, a dim declared at upload) are checked before anything else.
- A failed run is explained from the node onnxruntime names: an index guard's failure
  (OnnxBuilder.guard_range) in Paddle's terms, any other by the Paddle op it belongs to.

CompiledModel.run asks this object (before_run, after_run, explain): a new kind of run-time check
belongs here, and in the lowering that emits what it reads.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Final

import numpy as np

from executor.errors import (
    DimConstraintViolated,
    IndexOutOfRange,
    LoopTripLimitExceeded,
    RunFailed,
    TensorTooLarge,
)
from validator.dims import DimConstraint

log = logging.getLogger("graphgate.executor")

# Hidden graph outputs after the fetches, in a model with loops: true when some loop needed
# more iterations than the policy's bound, or grew a loop var past the tensor byte cap (the run
# then fails, never returning what the loop had when it stopped). By the lowering's flag kind.
LOOP_BOUND_EXCEEDED: Final = "graphgate:loop_bound_exceeded"
LOOP_TENSOR_TOO_LARGE: Final = "graphgate:loop_tensor_too_large"
LOOP_FLAG_OUTPUTS: Final = {"trips": LOOP_BOUND_EXCEEDED, "bytes": LOOP_TENSOR_TOO_LARGE}
# Hidden output holding the Mask of the block-0 select_input with this op index.
BRANCH_MASK_PREFIX: Final = "graphgate:branch_mask:"


@dataclass(frozen=True, slots=True)
class IndexCheck:
    """What a range guard (OnnxBuilder.guard_range) checks, so that its failure can be explained
    in Paddle's terms: "expected Ids in [0, 5), got 7".

    The range is [0, size), [-size, size) when negatives count from the end (`wraps`), or [0, size]
    (`inclusive`, SequenceLength's [0, T]). `size` is a dim known at compile time, (variable, axis)
    for one known at run time, or None (a size held in data). The offending value is quoted when
    the indices are a feed as is; `indices` and the variable in `size` are ONNX value names until
    named_checks() names them after Paddle variables."""

    slot: str  # the Paddle input holding the indices: "Ids", "Index", "X", "SequenceLength"
    indices: str | None  # the variable holding them, None when no Paddle variable holds them as is
    size: int | tuple[str, int] | None
    wraps: bool = False
    inclusive: bool = False
    size_name: str = "n"
    size_means: str = "the size of the indexed dim"

    def accepted(self, size: int) -> tuple[int, int]:
        """The lowest and the highest index this check accepts in a dim of `size`."""
        return (-size if self.wraps else 0), (size if self.inclusive else size - 1)


@dataclass(frozen=True, slots=True)
class HostIndexCheck:
    """An IndexCheck the session makes on a feed before running, in place of a guard in the
    graph: `check.indices` is a feed, `check.size` a dim known at compile time or (feed, axis)."""

    op: str  # "op 1 (lookup_table_v2)", as a guard's failure names it
    check: IndexCheck


@dataclass(frozen=True, slots=True)
class Bound:
    """`const + coef * dim`: a number, or an affine function of one feed dim ((feed, axis))."""

    const: int
    coef: int = 0
    dim: tuple[str, int] | None = None

    def at(self, shapes: Mapping[str, tuple[int, ...]]) -> int:
        """Its value at one request's feed shapes."""
        if self.dim is None:
            return self.const
        feed, axis = self.dim
        return self.const + self.coef * shapes[feed][axis]

    def plus(self, other: Bound) -> Bound | None:
        if other.dim is None or self.dim is None or other.dim == self.dim:
            dim = self.dim if self.dim is not None else other.dim
            coef = self.coef + other.coef
            return Bound(self.const + other.const, coef, dim if coef else None)
        return None  # two dims: not kept

    def times(self, factor: int) -> Bound:
        coef = self.coef * factor
        return Bound(self.const * factor, coef, self.dim if coef else None)


@dataclass(frozen=True, slots=True)
class ShapeIndexCheck:
    """An IndexCheck of indices the graph computes from a feed's dims (position ids, from a
    cumsum of ones), made on the request's shapes before running in place of a guard in the
    graph: their largest value, held whenever there are any, is `top` (a Bound on one feed
    dim); there are none when `empty_with` (a feed) is empty. The lowest was proven inside at
    compile time (executor/lower/_ranges.py); `check.size` is a number."""

    op: str  # "op 16 (lookup_table_v2)", as a guard's failure names it
    check: IndexCheck
    top: Bound
    empty_with: str | None

    def highest(self, shapes: Mapping[str, tuple[int, ...]]) -> int | None:
        """The largest index at these shapes; None when there are no indices."""
        if self.empty_with is not None and 0 in shapes[self.empty_with]:
            return None
        return self.top.at(shapes)


@dataclass(frozen=True, slots=True)
class RuntimeChecks:
    """What a run of one lowered model checks besides shapes (see the module docstring)."""

    # Graph outputs after the fetches, in order: LOOP_FLAG_OUTPUTS' raised, then Masks.
    hidden_outputs: tuple[str, ...] = ()
    host_checks: tuple[HostIndexCheck, ...] = ()  # made on the feeds before running
    shape_checks: tuple[ShapeIndexCheck, ...] = ()  # made on the feeds' shapes, once a shape
    index_checks: Mapping[str, IndexCheck] = field(default_factory=dict)  # by guard node name
    # The policy's figures the loop flags stand for (quoted by their errors).
    max_loop_trips: int | None = None
    max_tensor_bytes: int = 0
    # Paddle vars the graph takes as non-empty (a lean lowering: convert.lower)
    nonempty: tuple[str, ...] = ()

    def before_run(
        self, feeds: Mapping[str, np.ndarray], shapes: Mapping[str, tuple[int, ...]]
    ) -> None:
        """Raises IndexOutOfRange for the first host check a feed fails (its first value outside,
        in the feed's order); an empty feed has none outside."""
        extremes: dict[str, tuple[int, int]] = {}  # a feed's (min, max): several gathers read ids
        for host in self.host_checks:
            check = host.check
            feed, low, high = _fed_range(check, shapes)
            values = feeds[feed]
            if values.size == 0:
                continue
            if feed not in extremes:
                extremes[feed] = _extremes(values)
            least, most = extremes[feed]
            if least < low or most > high:
                # from None: raised as a guard's failure is, with no context to show
                message = _index_message(check, feeds, shapes)
                raise IndexOutOfRange(f"{host.op}: {message}") from None

    def check_shapes(self, shapes: Mapping[str, tuple[int, ...]]) -> None:
        """Raises IndexOutOfRange for the first shape check these feed shapes fail."""
        for shaped in self.shape_checks:
            highest = shaped.highest(shapes)
            assert isinstance(shaped.check.size, int)  # (ShapeIndexCheck's promise)
            if highest is not None and highest > shaped.check.accepted(shaped.check.size)[1]:
                message = _index_message(shaped.check, {}, shapes, got=highest)
                raise IndexOutOfRange(f"{shaped.op}: {message}")

    def host_bounds(self, shapes: Mapping[str, tuple[int, ...]]) -> tuple[HostBounds, ...]:
        """Each fed indices' tightest accepted range over every host check of it, at these
        shapes: a feed within these passes every check (`within`), one outside fails one."""
        bounds: dict[str, tuple[int, int]] = {}
        for host in self.host_checks:
            feed, low, high = _fed_range(host.check, shapes)
            least, most = bounds.get(feed, (low, high))
            bounds[feed] = (max(least, low), min(most, high))
        return tuple(HostBounds(name, low, high) for name, (low, high) in bounds.items())

    def after_run(self, hidden: Sequence[object]) -> dict[int, int]:
        """Given the hidden outputs' values (hidden_outputs' order): raises the typed error of
        the first loop flag the run set; returns the Mask value each select_input got, by op
        index."""
        raised = {
            name
            for name, value in zip(self.hidden_outputs, hidden, strict=True)
            if name in _LOOP_FLAGS and bool(np.asarray(value))
        }
        if LOOP_BOUND_EXCEEDED in raised:
            raise LoopTripLimitExceeded(
                f"a while loop ran past the policy's trip bound: expected at most "
                f"{self.max_loop_trips} iterations, got more"
            )
        if LOOP_TENSOR_TOO_LARGE in raised:
            raise TensorTooLarge(
                f"a while loop grew a loop var past the policy's tensor byte cap: expected at "
                f"most {self.max_tensor_bytes} bytes, got more"
            )
        return {
            int(name[len(BRANCH_MASK_PREFIX) :]): int(np.asarray(value).reshape(-1)[0])
            for name, value in zip(self.hidden_outputs, hidden, strict=True)
            if name.startswith(BRANCH_MASK_PREFIX)
        }

    def explain(
        self,
        ort_message: str,
        feeds: Mapping[str, np.ndarray] | None = None,
        shapes: Mapping[str, tuple[int, ...]] | None = None,
    ) -> RunFailed:
        """The typed error for an onnxruntime failure; its raw text goes to a debug log line
        only. `feeds` and `shapes` (the request's, by Paddle variable) fill in an index guard's
        numbers."""
        log.debug("onnxruntime failed to run a request: %s", ort_message)
        nodes = list(_NODE.finditer(ort_message))
        if not nodes:
            return RunFailed("the model could not run on these inputs")
        for node in reversed(nodes):  # the innermost node first
            block, index, op_type, _ = node.groups()
            check = self.index_checks.get(node.group(0)[len("Name:'") : -1])
            if check is not None:
                op = op_label(block, index, op_type)
                return IndexOutOfRange(f"{op}: {_index_message(check, feeds or {}, shapes or {})}")
        block, index, op_type, _ = nodes[-1].groups()
        return RunFailed(f"{op_label(block, index, op_type)} could not run on these inputs")


@dataclass(frozen=True, slots=True)
class HostBounds:
    """The range every host check of one fed indices accepts, at one request's shapes."""

    feed: str
    low: int
    high: int


def within(feeds: Mapping[str, np.ndarray], bounds: Sequence[HostBounds]) -> bool:
    """Whether every fed indices lies in its bounds (an empty feed does): one (min, max) per
    feed, where `RuntimeChecks.before_run` takes one per feed and compares it with each check."""
    for bound in bounds:
        values = feeds[bound.feed]
        if values.size and not _inside(values, bound.low, bound.high):
            return False
    return True


def _inside(values: np.ndarray, low: int, high: int) -> bool:
    unsigned = _UNSIGNED.get(values.dtype) if low == 0 else None
    if unsigned is not None and values.size > _FEW_IDS_ONE_PASS:
        # One reduction where two would be: viewed unsigned, a negative index is larger than
        # any `high`.
        return int(np.maximum.reduce(values.view(unsigned), axis=None)) <= high
    least, most = _extremes(values)
    return low <= least and most <= high


_LOOP_FLAGS: Final = frozenset(LOOP_FLAG_OUTPUTS.values())
_FEW_IDS: Final = 64  # where numpy's reductions start to cost less than a list's (_extremes)
_FEW_IDS_ONE_PASS: Final = 16  # the same, for one reduction (_inside)
_UNSIGNED: Final = {np.dtype(f"i{n}"): np.dtype(f"u{n}") for n in (1, 2, 4, 8)}


def _extremes(values: np.ndarray) -> tuple[int, int]:
    """(min, max) of integer indices. A few dozen are read as Python ints: numpy's two
    reductions cost ~8 us whatever their size (their setup), the list ~3 us for 16 ids, as
    much at 64, 13 us at 128 and 90 us at 1,024 (a batch of 8 sequences of 128 ids)."""
    if values.size <= _FEW_IDS:
        flat = values.ravel().tolist()
        return min(flat), max(flat)
    return int(values.min()), int(values.max())


def check_dim_constraints(
    constraints: Sequence[DimConstraint], feeds: Mapping[str, np.ndarray]
) -> None:
    """Raises DimConstraintViolated for the first constraint a feed's dims break. A feed that
    is missing or of another rank is left to the signature check that follows."""
    for constraint in constraints:
        shape = np.shape(feeds[constraint.feed]) if constraint.feed in feeds else ()
        if constraint.axis >= len(shape):
            continue
        problem = constraint.violation(int(shape[constraint.axis]))
        if problem is not None:
            raise DimConstraintViolated(f"input {constraint.feed!r}: {problem}")


# onnxruntime's text names the failing node (every provider's text does): that name alone tells
# an index guard from another failure; nothing else of onnxruntime's text is read. A node of a
# sub-block ("1_0_lookup_table_v2/...": block 1, op 0) is named after the If or Loop holding it.
_NODE: Final = re.compile(r"Name:'(?:(\d+)_)?(\d+)_([a-z][a-z0-9_]*)/([^']*)'")


def named_checks(
    checks: Mapping[str, IndexCheck], paddle_names: Mapping[str, str]
) -> dict[str, IndexCheck]:
    """The checks with ONNX value names replaced by the Paddle variables they hold at the end of
    the program (None where none does: the failure then says less, never something wrong)."""

    return {node: named_check(check, paddle_names) for node, check in checks.items()}


def named_check(check: IndexCheck, paddle_names: Mapping[str, str]) -> IndexCheck:
    """One check of named_checks()."""
    indices = paddle_names.get(check.indices) if check.indices is not None else None
    size = check.size
    if isinstance(size, tuple):
        var = paddle_names.get(size[0])
        size = None if var is None else (var, size[1])
    return replace(check, indices=indices, size=size)


def op_label(block: str | None, index: str, op_type: str) -> str:
    """How a failure names its Paddle op, whether a guard or the session's host check found it."""
    return f"op {index} ({op_type})" if block is None else f"block {block}, op {index} ({op_type})"


def _index_message(
    check: IndexCheck,
    feeds: Mapping[str, np.ndarray],
    shapes: Mapping[str, tuple[int, ...]],
    got: int | None = None,
) -> str:
    size = _concrete_size(check.size, shapes)
    name = check.size_name if size is None else str(size)
    interval = f"[{'-' + name if check.wraps else '0'}, {name}{']' if check.inclusive else ')'}"
    expected = f"expected {check.slot} in {interval}"
    if size is None:
        expected += f" where {check.size_name} is {check.size_means}"
    if got is not None:  # known without the values (a ShapeIndexCheck's)
        return f"{expected}, got {got}"
    fed = feeds.get(check.indices) if check.indices is not None else None
    if fed is None or size is None:
        return f"{expected}, got one outside"
    values = np.asarray(fed).reshape(-1).astype(np.int64)
    low, high = check.accepted(size)
    outside = values[(values < low) | (values > high)]
    # None outside: the guard saw other values than the feed's (the variable was rewritten).
    return f"{expected}, got {int(outside[0])}" if outside.size else f"{expected}, got one outside"


def _fed_range(check: IndexCheck, shapes: Mapping[str, tuple[int, ...]]) -> tuple[str, int, int]:
    """The feed a host check reads, and the lowest and highest index it accepts at `shapes`."""
    assert check.indices is not None  # OnnxBuilder records only checks of a feed
    size = _concrete_size(check.size, shapes)
    assert size is not None  # a dim known at compile time, or a feed's: known by now
    return (check.indices, *check.accepted(size))


def _concrete_size(
    size: int | tuple[str, int] | None, shapes: Mapping[str, tuple[int, ...]]
) -> int | None:
    if not isinstance(size, tuple):
        return size
    shape = shapes.get(size[0])
    return shape[size[1]] if shape is not None and len(shape) > size[1] else None
