"""Control flow: conditional_block and while (ops owning a sub-block), select_input, increment.

What `paddle.static.nn.cond` exports: two conditional_blocks (one on the condition, one on its
logical_not), each writing fresh outer vars listed in Out, and a select_input whose Mask is the
condition cast to int32. What `paddle.static.nn.while_loop` exports: a while whose sub-block
rewrites the loop vars (Out) in place and recomputes the Condition var at its end.

A sub-block's ops are interpreted by validator/interpret.py and inferred by validator/infer.py
(both need the block), so the rules here only check the op's own slots: alone, a block op writes
nothing. The ONNX lowering (If, Loop) lives in executor/lower/control.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from graph_proto.builder import Attr
from graph_proto.framework_pb2 import BLOCK
from graph_proto.types import ALL, UNKNOWN, DType, Shape, numel
from validator.attrs import BlockRef
from validator.diagnostics import Code
from validator.ops._batch import CONTROL, ROWWISE
from validator.ops._cases import boolean, f32, i32, i64
from validator.ops._def import (
    AttrError,
    BatchView,
    Case,
    Couples,
    In,
    OpDef,
    Out,
    ShapeError,
    TensorType,
)

CONDITIONAL_BLOCK_OP: Final = "conditional_block"
WHILE_OP: Final = "while"
BLOCK_OPS: Final = frozenset({CONDITIONAL_BLOCK_OP, WHILE_OP})


@dataclass(frozen=True, slots=True)
class ConditionalBlockAttrs:
    sub_block: BlockRef
    is_scalar_condition: bool = False


@dataclass(frozen=True, slots=True)
class WhileAttrs:
    sub_block: BlockRef
    is_test: bool = False  # Paddle writes True in inference programs; it changes nothing here


def single_element(t: TensorType, slot: str) -> None:
    """A branch or loop condition: one boolean, shape [] or [1] (or [1, 1], ...)."""
    if t.known and numel(t.shape) == 1:
        return
    if any(d > 1 for d in t.shape):
        raise ShapeError(f"{slot}: expected a single-element tensor, got dims {list(t.shape)}")
    if not t.known:
        # NOTE: an unknown dim is 1 at run time or the op fails there; inference cannot tell.
        raise ShapeError(f"{slot}: expected a single-element tensor, got dims {list(t.shape)}")


def _conditional_block_infer(
    cond: TensorType, _inputs: tuple[TensorType, ...] | None, a: ConditionalBlockAttrs
) -> list[tuple[TensorType, ...]]:
    if not a.is_scalar_condition:
        # Paddle then runs the block when every Input is non-empty: a different op in disguise.
        raise AttrError("expected is_scalar_condition true (a branch on one boolean), got false")
    single_element(cond, "Cond")
    return [()]


def _while_infer(
    _x: tuple[TensorType, ...] | None, cond: TensorType, _a: WhileAttrs
) -> list[tuple[TensorType, ...]]:
    single_element(cond, "Condition")
    return [()]


_BLOCK_1 = Attr(BLOCK, 1)

CONDITIONAL_BLOCK = OpDef(
    op_type=CONDITIONAL_BLOCK_OP,
    doc="Runs sub_block when the one-element boolean Cond is true; the block writes the outer vars listed in Out.",
    inputs=(In("Cond", DType.BOOL), In("Input", None, variadic=True, optional=True)),
    outputs=(
        Out("Out", variadic=True, optional=True),
        Out("Scope", unused=True, optional=True),
    ),
    types={"T": ALL},
    attrs=ConditionalBlockAttrs,
    infer=_conditional_block_infer,
    batch=CONTROL,
    cost=lambda *_: 0,
    cases=(
        Case(
            {"Cond": np.asarray(True), "Input": (f32(2, 3),)},
            {"sub_block": _BLOCK_1, "is_scalar_condition": True},
            expect=lambda *_: (),
        ),
        Case(
            {"Cond": boolean(2), "Input": (f32(2),)},
            {"sub_block": _BLOCK_1, "is_scalar_condition": True},
            raises="Cond: expected a single-element tensor, got dims [2]",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"Cond": np.asarray(True)},
            {"sub_block": _BLOCK_1},
            raises="expected is_scalar_condition true",
            code=Code.ATTR_VALUE,
        ),
    ),
)

WHILE = OpDef(
    op_type=WHILE_OP,
    doc="Runs sub_block while Condition is true; the block rewrites the loop vars (Out) and Condition. Bounded by the tenant policy.",
    inputs=(In("X", None, variadic=True, optional=True), In("Condition", DType.BOOL)),
    outputs=(
        Out("Out", variadic=True, optional=True),
        Out("StepScopes", unused=True, optional=True),
    ),
    types={"T": ALL},
    attrs=WhileAttrs,
    infer=_while_infer,
    batch=CONTROL,
    cost=lambda *_: 0,
    cases=(
        Case(
            {"X": (i64(1),), "Condition": np.asarray([False])},
            {"sub_block": _BLOCK_1, "is_test": True},
            expect=lambda *_: (),
        ),
        Case(
            {"Condition": boolean(1, 2)},
            {"sub_block": _BLOCK_1},
            raises="Condition: expected a single-element tensor, got dims [1, 2]",
            code=Code.SHAPE_MISMATCH,
        ),
    ),
)


def _select_input_infer(xs: tuple[TensorType, ...], mask: TensorType, _a: object) -> Shape:
    single_element(mask, "Mask")
    if len(xs) != 2:
        raise ShapeError(f"X: expected 2 branch values (false, true), got {len(xs)}")
    first, second = xs
    if first.rank != second.rank:
        raise ShapeError(
            f"X: expected branch values of one rank, got dims {list(first.shape)} and "
            f"{list(second.shape)}"
        )
    # A dim the branches disagree on is known only once a branch has run.
    return tuple(a if a == b else UNKNOWN for a, b in zip(first.shape, second.shape, strict=True))


def _select_input_batch(view: BatchView) -> int:
    if view.axis("Mask") is not None:
        raise Couples("selects by a batched Mask: one choice for every row")
    axes = set(view.axes["X"])
    if len(axes) != 1 or None in axes:
        raise Couples("selects between inputs that carry the batch differently")
    return next(a for a in axes if a is not None)


SELECT_INPUT = OpDef(
    op_type="select_input",
    doc="Out = X[Mask]: picks the value of the branch that ran (X[0] false, X[1] true).",
    inputs=(In("X", variadic=True), In("Mask", DType.INT32)),
    outputs=(Out("Out"),),
    types={"T": ALL},
    infer=_select_input_infer,
    batch=_select_input_batch,
    cost=lambda *_: 0,
    cases=(
        Case(
            {"X": (f32(2, 3), f32(2, 3)), "Mask": np.asarray(1, np.int32)},
            expect=lambda xs, mask, _a: xs[int(mask)],
        ),
        Case(
            {"X": (i64(4), i64(4)), "Mask": np.asarray([0], np.int32)},
            expect=lambda xs, mask, _a: xs[int(mask[0])],
        ),
        Case(
            {"X": (f32(2, 3), f32(3)), "Mask": np.asarray(0, np.int32)},
            raises="expected branch values of one rank, got dims [2, 3] and [3]",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"X": (f32(2),), "Mask": i32(1)},
            raises="X: expected 2 branch values (false, true), got 1",
            code=Code.SHAPE_MISMATCH,
        ),
    ),
)


@dataclass(frozen=True, slots=True)
class IncrementAttrs:
    step: float = 1.0


_INCREMENT_TYPES: Final = frozenset({DType.INT32, DType.INT64, DType.FP32, DType.FP64})


def _increment_infer(x: TensorType, a: IncrementAttrs) -> Shape | TensorType:
    if not x.known or numel(x.shape) != 1:
        raise ShapeError(f"X: expected a single-element tensor, got dims {list(x.shape)}")
    if x.dtype in (DType.INT32, DType.INT64) and x.value is not None:
        # NOTE: the kernel adds static_cast<T>(step), which truncates toward zero as int() does.
        return TensorType(x.dtype, x.shape, tuple(int(v) + int(a.step) for v in x.value))
    return x.shape


def _increment_reference(x: np.ndarray, a: IncrementAttrs) -> np.ndarray:
    return np.asarray(x + np.asarray(a.step).astype(x.dtype))


INCREMENT = OpDef(
    op_type="increment",
    doc="Out = X + step for a one-element X (a loop counter); may write X in place.",
    inputs=(In("X"),),
    outputs=(Out("Out", inplace_of="X"),),
    types={"T": _INCREMENT_TYPES},
    attrs=IncrementAttrs,
    infer=_increment_infer,
    batch=ROWWISE,
    cases=(
        Case({"X": i64(1)}, expect=_increment_reference),
        Case({"X": np.asarray(3, np.int32)}, {"step": 2.0}, expect=_increment_reference),
        Case({"X": f32(1)}, {"step": -0.5}, expect=_increment_reference),
        Case(
            {"X": i64(2)},
            raises="X: expected a single-element tensor, got dims [2]",
            code=Code.SHAPE_MISMATCH,
        ),
    ),
)

OPS = (CONDITIONAL_BLOCK, WHILE, SELECT_INPUT, INCREMENT)
