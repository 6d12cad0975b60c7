"""Binary elementwise arithmetic with Paddle's `axis` broadcasting, and comparisons/logic."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from graph_proto.types import ALL, INDICES, NUMERIC, DType, Shape
from validator.diagnostics import Code
from validator.ops._batch import aligned
from validator.ops._cases import boolean, f32, i64, pos32
from validator.ops._def import AxisError, BatchView, Case, In, OpDef, Out, TensorType
from validator.ops._operands import carry
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


IntKernel = Callable[[np.ndarray, np.ndarray], np.ndarray | None]


def _shape_arithmetic(kernel: IntKernel) -> Callable[..., Shape | TensorType]:
    """The elementwise rule, with the values of small int tensors riding along (`B // nW` in a
    reshape's ShapeTensor), computed by `kernel` as Paddle's integer kernel does (None: not
    computed at compile time, e.g. a 0 divisor, which fails the run)."""

    def infer(x: TensorType, y: TensorType, a: ElementwiseAttrs) -> Shape | TensorType:
        xs, ys = paddle_align(x.shape, y.shape, a.axis)
        shape = broadcast(xs, ys)
        if x.dtype not in INDICES or y.dtype != x.dtype:
            return shape

        def compute(vx: np.ndarray, vy: np.ndarray) -> np.ndarray:
            typed = [v.astype(x.dtype.numpy).reshape(s) for v, s in ((vx, xs), (vy, ys))]
            result = kernel(*typed)
            if result is None:
                raise _NotComputed
            return np.broadcast_to(result.astype(x.dtype.numpy), shape)

        try:
            return carry(x, shape, compute, y)
        except _NotComputed:
            return shape

    return infer


class _NotComputed(Exception):
    """An int kernel declined to compute at compile time."""


def _truncating_div(x: np.ndarray, y: np.ndarray) -> np.ndarray | None:
    """C++'s integer `/` (toward zero), as Paddle's elementwise_div kernel computes ints."""
    if not y.all():
        return None
    return np.asarray(np.sign(x) * np.sign(y) * (np.abs(x) // np.abs(y)))


def _flooring_div(x: np.ndarray, y: np.ndarray) -> np.ndarray | None:
    return np.asarray(np.floor_divide(x, y)) if y.all() else None


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
    ints: IntKernel | None = None,
) -> OpDef:
    """Declares a two-input elementwise op with Paddle broadcasting; `ints` computes the values
    of small int tensors at compile time (shape arithmetic)."""
    ref = _aligned(reference)
    return OpDef(
        op_type=paddle_type,
        doc=f"Elementwise {paddle_type.removeprefix('elementwise_')} of X and Y with Paddle's axis broadcasting.",
        inputs=(In("X"), In("Y")),
        outputs=(Out("Out", out if out is not None else "T"),),
        types={"T": types},
        attrs=attrs,
        infer=_elementwise_infer if ints is None else _shape_arithmetic(ints),
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


ELEMENTWISE_ADD = binary("elementwise_add", np.add, ints=np.add)
ELEMENTWISE_SUB = binary("elementwise_sub", np.subtract, ints=np.subtract)
ELEMENTWISE_MUL = binary("elementwise_mul", np.multiply, ints=np.multiply)
ELEMENTWISE_DIV = binary("elementwise_div", np.divide, x=pos32, ints=_truncating_div)
ELEMENTWISE_MAX = binary("elementwise_max", np.maximum, ints=np.maximum)
ELEMENTWISE_MIN = binary("elementwise_min", np.minimum, ints=np.minimum)
ELEMENTWISE_POW = binary("elementwise_pow", np.power, x=pos32)
EQUAL = binary("equal", np.equal, types=ALL, out=DType.BOOL, x=i64, attrs=CompareAttrs)
NOT_EQUAL = binary("not_equal", np.not_equal, types=ALL, out=DType.BOOL, x=i64, attrs=CompareAttrs)
GREATER_THAN = binary("greater_than", np.greater, out=DType.BOOL, attrs=CompareAttrs)
GREATER_EQUAL = binary("greater_equal", np.greater_equal, out=DType.BOOL, attrs=CompareAttrs)
LESS_THAN = binary("less_than", np.less, out=DType.BOOL, attrs=CompareAttrs)
LESS_EQUAL = binary("less_equal", np.less_equal, out=DType.BOOL, attrs=CompareAttrs)


def _floordiv_ints(*shape: int) -> np.ndarray:
    """Negatives and positives on both sides, never 0 (Paddle fails on an integer 0 divisor)."""
    values = np.array([7, -7, 6, -6, 1, -1, 3, -5, 9, -9, 2, -2], np.int64)
    return np.resize(values, shape)


def _floordiv_floats(*shape: int) -> np.ndarray:
    values = np.array([7.5, -7.5, 6.0, -6.0, 0.5, -0.25, 3.0, -5.0, 1e-3, -9.0, 2.0, -2.0])
    return np.resize(values, shape).astype(np.float32)


def _floordiv_divisors(*shape: int) -> np.ndarray:
    values = np.array([2, -2, 3, -3, -1, 1, 4, -4, 5, 2, -7, 7], np.int64)
    return np.resize(values, shape)


def _floordiv_case(x: np.ndarray, y: np.ndarray) -> Case:
    return Case({"X": x, "Y": y}, expect=_aligned(np.floor_divide))


# NOTE: Paddle floors (Python's sign rule, not C's truncation) for integers and floats alike;
# an integer 0 divisor fails the run, a float one gives inf or nan.
def _floordiv() -> OpDef:
    plain = binary("elementwise_floordiv", np.floor_divide, x=pos32, ints=_flooring_div)
    return replace(
        plain,
        doc="Elementwise floor(X / Y) with Python's sign rules (Paddle's axis broadcasting).",
        types={"T": NUMERIC - {DType.FP16, DType.BF16}},
        cases=(
            *plain.cases,
            _floordiv_case(_floordiv_ints(3, 4), _floordiv_divisors(3, 4)),
            _floordiv_case(
                _floordiv_ints(2, 6).astype(np.int32), _floordiv_divisors(6).astype(np.int32)
            ),
            _floordiv_case(_floordiv_floats(3, 4), _floordiv_divisors(3, 4).astype(np.float32)),
            _floordiv_case(
                _floordiv_floats(2, 6).astype(np.float64), _floordiv_floats(6).astype(np.float64)
            ),
        ),
    )


ELEMENTWISE_FLOORDIV = _floordiv()
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
    ELEMENTWISE_FLOORDIV,
    EQUAL,
    NOT_EQUAL,
    GREATER_THAN,
    GREATER_EQUAL,
    LESS_THAN,
    LESS_EQUAL,
    LOGICAL_AND,
    LOGICAL_OR,
)
