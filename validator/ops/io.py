"""feed and fetch: where a program's inputs enter and its outputs leave (block 0 only)."""

from __future__ import annotations

from dataclasses import dataclass

from graph_proto.types import ALL, Shape
from validator.diagnostics import Code
from validator.ops._batch import ROWWISE
from validator.ops._cases import f32, i64
from validator.ops._def import AttrError, Case, In, OpDef, Out, TensorType


@dataclass(frozen=True, slots=True)
class ColAttrs:
    col: int


def _check_col(a: ColAttrs) -> None:
    if a.col < 0:
        raise AttrError(f"col must be >= 0, got {a.col}")


def _feed_infer(x: TensorType, a: ColAttrs) -> TensorType:
    # The engine hands the feed target's type in as X (the holder var has none); at run time
    # it carries the values of small integer feeds, which size data-dependent tensors.
    _check_col(a)
    return x


def _fetch_infer(_x: TensorType, a: ColAttrs) -> list[Shape]:
    _check_col(a)
    return []


FEED = OpDef(
    op_type="feed",
    doc="Binds input number `col` of the request to its target var, as declared in its VarDesc.",
    inputs=(In("X"),),
    outputs=(Out("Out"),),
    types={"T": ALL},
    attrs=ColAttrs,
    infer=_feed_infer,
    batch=ROWWISE,
    cost=lambda *_: 0,
    cases=(
        Case({"X": f32(2, 3)}, {"col": 0}, expect=lambda x, a: x),
        Case({"X": i64(4)}, {"col": 1}, expect=lambda x, a: x),
        Case({"X": f32(2)}, {"col": -1}, raises="col must be >= 0, got -1", code=Code.ATTR_VALUE),
    ),
)

FETCH = OpDef(
    op_type="fetch",
    doc="Returns X as output number `col` of the program.",
    inputs=(In("X"),),
    outputs=(Out("Out", unused=True),),
    types={"T": ALL},
    attrs=ColAttrs,
    infer=_fetch_infer,
    batch=ROWWISE,
    cost=lambda *_: 0,
    cases=(
        Case({"X": f32(2, 3)}, {"col": 0}, expect=lambda x, a: ()),
        Case({"X": f32(2)}, {"col": -5}, raises="col must be >= 0, got -5", code=Code.ATTR_VALUE),
    ),
)

OPS = (FEED, FETCH)
