"""Binary elementwise arithmetic with Paddle's `axis` broadcasting, and comparisons/logic."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from graph_proto.types import ALL, NUMERIC, DType, Shape
from validator.diagnostics import Code
from validator.ops._batch import aligned
from validator.ops._cases import boolean, f32, i64, pos32
from validator.ops._def import AxisError, BatchView, Case, In, OpDef, Out, TensorType
from validator.ops._shape import broadcast


@dataclass(frozen=True, slots=True)
class ElementwiseAttrs:
    axis: int = -1


@dataclass(frozen=True, slots=True)
class CompareAttrs(ElementwiseAttrs):
    # Paddle 3.3.1 writes force_cpu into every legacy comparison; it only picks a device.
    force_cpu: bool = False


def paddle_align(x: Shape, y: Shape, axis: int) -> tuple[Shape, Shape]:
    """Pads the lower-rank operand with 1s so that it starts at `axis` of the other.

    NOTE: Paddle's elementwise `axis` is not numpy broadcasting: Y of rank 1 with axis=1 against
    X [N, C, H, W] lines up with C, not with W. axis=-1 means numpy's right alignment.
    """
    if len(x) == len(y):
        return x, y
    big, small = (x, y) if len(x) > len(y) else (y, x)
    diff = len(big) - len(small)
    start = diff if axis == -1 else axis
    if not 0 <= start <= diff:
        raise AxisError(
            f"axis must be -1 or in [0, {diff}] for ranks {len(x)} and {len(y)}, got {axis}"
        )
    padded = (1,) * start + small + (1,) * (diff - start)
    return (big, padded) if len(x) > len(y) else (padded, big)


def _elementwise_infer(x: TensorType, y: TensorType, a: ElementwiseAttrs) -> Shape:
    xs, ys = paddle_align(x.shape, y.shape, a.axis)
    return broadcast(xs, ys)


def _aligned(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[..., np.ndarray]:
    """numpy reference honouring Paddle's axis."""

    def reference(x: np.ndarray, y: np.ndarray, a: ElementwiseAttrs) -> np.ndarray:
        xs, ys = paddle_align(x.shape, y.shape, a.axis)
        return np.asarray(fn(x.reshape(xs), y.reshape(ys)))

    return reference


def _elementwise_batch(view: BatchView) -> int:
    """Paddle's `axis` says where the lower-rank operand's dims land in the output."""
    x, y = view.type("X").rank, view.type("Y").rank
    start = abs(x - y) if view.attrs.axis == -1 else view.attrs.axis
    return aligned(view, {"X": [start if x < y else 0], "Y": [start if y < x else 0]})


def binary(
    paddle_type: str,
    reference: Callable[[np.ndarray, np.ndarray], np.ndarray],
    *,
    types: frozenset[DType] = NUMERIC,
    out: DType | None = None,
    x: Callable[..., np.ndarray] = f32,
    attrs: type[ElementwiseAttrs] = ElementwiseAttrs,
) -> OpDef:
    """Declares a two-input elementwise op with Paddle broadcasting."""
    ref = _aligned(reference)
    return OpDef(
        op_type=paddle_type,
        doc=f"Elementwise {paddle_type.removeprefix('elementwise_')} of X and Y with Paddle's axis broadcasting.",
        inputs=(In("X"), In("Y")),
        outputs=(Out("Out", out if out is not None else "T"),),
        types={"T": types},
        attrs=attrs,
        infer=_elementwise_infer,
        batch=_elementwise_batch,
        cases=(
            Case({"X": x(2, 3, 4), "Y": x(2, 3, 4)}, expect=ref),
            Case({"X": x(2, 3, 4, 5), "Y": x(3)}, {"axis": 1}, expect=ref),
            Case({"X": x(2, 1, 4), "Y": x(3, 1)}, expect=ref),
            Case({"X": x(), "Y": x(3)}, expect=ref),
            Case(
                {"X": x(2, 3), "Y": x(4)},
                raises="expected dims that are equal or 1, got 3 and 4",
                code=Code.SHAPE_MISMATCH,
            ),
            Case(
                {"X": x(2, 3), "Y": x(3)},
                {"axis": 2},
                raises="axis must be -1 or in [0, 1]",
                code=Code.AXIS_INVALID,
            ),
        ),
    )


ELEMENTWISE_ADD = binary("elementwise_add", np.add)
ELEMENTWISE_SUB = binary("elementwise_sub", np.subtract)
ELEMENTWISE_MUL = binary("elementwise_mul", np.multiply)
ELEMENTWISE_DIV = binary("elementwise_div", np.divide, x=pos32)
ELEMENTWISE_MAX = binary("elementwise_max", np.maximum)
ELEMENTWISE_MIN = binary("elementwise_min", np.minimum)
ELEMENTWISE_POW = binary("elementwise_pow", np.power, x=pos32)
EQUAL = binary("equal", np.equal, types=ALL, out=DType.BOOL, x=i64, attrs=CompareAttrs)
NOT_EQUAL = binary("not_equal", np.not_equal, types=ALL, out=DType.BOOL, x=i64, attrs=CompareAttrs)
GREATER_THAN = binary("greater_than", np.greater, out=DType.BOOL, attrs=CompareAttrs)
GREATER_EQUAL = binary("greater_equal", np.greater_equal, out=DType.BOOL, attrs=CompareAttrs)
LESS_THAN = binary("less_than", np.less, out=DType.BOOL, attrs=CompareAttrs)
LESS_EQUAL = binary("less_equal", np.less_equal, out=DType.BOOL, attrs=CompareAttrs)
LOGICAL_AND = binary("logical_and", np.logical_and, types=frozenset({DType.BOOL}), x=boolean)
LOGICAL_OR = binary("logical_or", np.logical_or, types=frozenset({DType.BOOL}), x=boolean)

OPS = (
    ELEMENTWISE_ADD,
    ELEMENTWISE_SUB,
    ELEMENTWISE_MUL,
    ELEMENTWISE_DIV,
    ELEMENTWISE_MAX,
    ELEMENTWISE_MIN,
    ELEMENTWISE_POW,
    EQUAL,
    NOT_EQUAL,
    GREATER_THAN,
    GREATER_EQUAL,
    LESS_THAN,
    LESS_EQUAL,
    LOGICAL_AND,
    LOGICAL_OR,
)
