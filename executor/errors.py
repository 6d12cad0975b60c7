"""Typed run-time errors; each message says what was expected and what was received."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

import numpy as np

log = logging.getLogger("graphgate.executor")


class ExecutionError(ValueError):
    """A request the model cannot run (the caller's fault: a 4xx in the service)."""

    code = "EXECUTION_ERROR"


class MissingInput(ExecutionError):
    code = "INPUT_MISSING"


class UnexpectedInput(ExecutionError):
    code = "INPUT_UNEXPECTED"


class WrongDType(ExecutionError):
    code = "INPUT_DTYPE"


class WrongRank(ExecutionError):
    code = "INPUT_RANK"


class WrongShape(ExecutionError):
    code = "INPUT_SHAPE"


class IncompatibleInputs(ExecutionError):
    """Inputs the program's ops cannot take: dims that do not combine (batch 2 here, 3 there),
    or values that size a tensor impossibly (a range with step 0)."""

    code = "INPUT_INCOMPATIBLE"


class InputTooLarge(ExecutionError):
    code = "INPUT_TOO_LARGE"


class SizeUnbounded(ExecutionError):
    """A tensor sized by input data whose size cannot be known before running."""

    code = "SIZE_UNBOUNDED"


class TensorTooLarge(ExecutionError):
    """A tensor sized by input data would exceed the policy's byte cap."""

    code = "TENSOR_TOO_LARGE"


class RunFailed(ExecutionError):
    """onnxruntime refused the request; the message never quotes onnxruntime's own text."""

    code = "RUN_FAILED"


class IndexOutOfRange(RunFailed):
    """An index in the request's data outside the range its op accepts (Paddle refuses it too)."""

    code = "INDEX_OUT_OF_RANGE"


class LoopTripLimitExceeded(ExecutionError):
    """A while loop needed more iterations than the tenant policy's bound; nothing is returned."""

    code = "LOOP_TRIP_LIMIT"


class OutputMismatch(RuntimeError):
    """An output's shape differs from the re-inferred one: a bug in graphgate, never the caller's."""

    code = "OUTPUT_MISMATCH"


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


@dataclass(frozen=True, slots=True)
class HostIndexCheck:
    """An IndexCheck the session makes on a feed before running, in place of a guard in the
    graph: `check.indices` is a feed, `check.size` a dim known at compile time or (feed, axis)."""

    op: str  # "op 1 (lookup_table_v2)", as a guard's failure names it
    check: IndexCheck


def check_fed_indices(
    checks: Sequence[HostIndexCheck],
    feeds: Mapping[str, np.ndarray],
    shapes: Mapping[str, tuple[int, ...]],
) -> None:
    """Raises IndexOutOfRange for the first check a feed fails (its first value outside, in the
    feed's order); an empty feed has none outside."""
    for host in checks:
        check = host.check
        assert check.indices is not None  # OnnxBuilder records only checks of a feed
        values = feeds[check.indices]
        size = _concrete_size(check.size, shapes)
        assert size is not None  # a dim known at compile time, or a feed's: known by now
        if values.size == 0:
            continue
        low, high = _accepted(check, size)
        if int(values.min()) < low or int(values.max()) > high:
            # from None: raised as a guard's failure is, with no context to show
            raise IndexOutOfRange(f"{host.op}: {_index_message(check, feeds, shapes)}") from None


def named_checks(
    checks: Mapping[str, IndexCheck], paddle_names: Mapping[str, str]
) -> dict[str, IndexCheck]:
    """The checks with ONNX value names replaced by the Paddle variables they hold at the end of
    the program (None where none does: the failure then says less, never something wrong)."""

    def named(check: IndexCheck) -> IndexCheck:
        indices = paddle_names.get(check.indices) if check.indices is not None else None
        size = check.size
        if isinstance(size, tuple):
            var = paddle_names.get(size[0])
            size = None if var is None else (var, size[1])
        return replace(check, indices=indices, size=size)

    return {node: named(check) for node, check in checks.items()}


# onnxruntime's text names the failing node (every provider's text does): that name alone tells
# an index guard from another failure; nothing else of onnxruntime's text is read. A node of a
# sub-block ("1_0_lookup_table_v2/...": block 1, op 0) is named after the If or Loop holding it.
_NODE: Final = re.compile(r"Name:'(?:(\d+)_)?(\d+)_([a-z][a-z0-9_]*)/([^']*)'")


def run_failed(
    ort_message: str,
    index_checks: Mapping[str, IndexCheck],
    feeds: Mapping[str, np.ndarray] | None = None,
    shapes: Mapping[str, tuple[int, ...]] | None = None,
) -> RunFailed:
    """The typed error for an onnxruntime failure; its raw text goes to a debug log line only.
    `feeds` and `shapes` (the request's, by Paddle variable) fill in an index guard's numbers."""
    log.debug("onnxruntime failed to run a request: %s", ort_message)
    nodes = list(_NODE.finditer(ort_message))
    if not nodes:
        return RunFailed("the model could not run on these inputs")
    for node in reversed(nodes):  # the innermost node first
        block, index, op_type, _ = node.groups()
        check = index_checks.get(node.group(0)[len("Name:'") : -1])
        if check is not None:
            op = op_label(block, index, op_type)
            return IndexOutOfRange(f"{op}: {_index_message(check, feeds or {}, shapes or {})}")
    block, index, op_type, _ = nodes[-1].groups()
    return RunFailed(f"{op_label(block, index, op_type)} could not run on these inputs")


def op_label(block: str | None, index: str, op_type: str) -> str:
    """How a failure names its Paddle op, whether a guard or the session's host check found it."""
    return f"op {index} ({op_type})" if block is None else f"block {block}, op {index} ({op_type})"


def _index_message(
    check: IndexCheck, feeds: Mapping[str, np.ndarray], shapes: Mapping[str, tuple[int, ...]]
) -> str:
    size = _concrete_size(check.size, shapes)
    name = check.size_name if size is None else str(size)
    interval = f"[{'-' + name if check.wraps else '0'}, {name}{']' if check.inclusive else ')'}"
    expected = f"expected {check.slot} in {interval}"
    if size is None:
        expected += f" where {check.size_name} is {check.size_means}"
    fed = feeds.get(check.indices) if check.indices is not None else None
    if fed is None or size is None:
        return f"{expected}, got one outside"
    values = np.asarray(fed).reshape(-1).astype(np.int64)
    low, high = _accepted(check, size)
    outside = values[(values < low) | (values > high)]
    # None outside: the guard saw other values than the feed's (the variable was rewritten).
    return f"{expected}, got {int(outside[0])}" if outside.size else f"{expected}, got one outside"


def _accepted(check: IndexCheck, size: int) -> tuple[int, int]:
    """The lowest and the highest index `check` accepts in a dim of this size."""
    return (-size if check.wraps else 0), (size if check.inclusive else size - 1)


def _concrete_size(
    size: int | tuple[str, int] | None, shapes: Mapping[str, tuple[int, ...]]
) -> int | None:
    if not isinstance(size, tuple):
        return size
    shape = shapes.get(size[0])
    return shape[size[1]] if shape is not None and len(shape) > size[1] else None
