"""Activations (relu family, sigmoid, softplus, softmax, prelu, dropout) and the `unary` factory."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from graph_proto.types import FLOATS, DType, Shape
from validator.diagnostics import Code
from validator.ops._batch import ROWWISE, along, batch_at, only
from validator.ops._cases import f32, i32, i64
from validator.ops._def import (
    AttrError,
    AxisError,
    BatchView,
    Case,
    In,
    NoAttrs,
    OpDef,
    Out,
    ShapeError,
    TensorType,
)
from validator.ops._shape import merge_dim, norm_axis, product

# Paddle "extra" attrs (oneDNN/cuDNN switches) that older exports keep; they never change results.
_ONEDNN: Final = frozenset({"use_mkldnn", "use_onednn"})
_CUDNN: Final = _ONEDNN | {"use_cudnn"}
_ONEDNN_DTYPE: Final = frozenset({"mkldnn_data_type", "onednn_data_type"})


def require_finite(what: str, value: float) -> None:
    if not math.isfinite(value):
        raise AttrError(f"{what}: expected a finite number, got {value}")


def _fixed(what: str, value: float, expected: float) -> None:
    # NOTE: Paddle 3 kernels ignore these attributes (Paddle 2 honoured them), so another value
    # would compute differently depending on the Paddle version; refuse rather than guess.
    if value != expected:
        raise AttrError(
            f"{what}: expected {expected}, the only value Paddle 3 computes with, got {value}"
        )


def unary(
    paddle_type: str,
    formula: str,
    reference: Callable[..., Any],
    *,
    types: frozenset[DType] = FLOATS,
    out: DType | None = None,
    attrs: type[Any] = NoAttrs,
    check: Callable[[Any], None] | None = None,
    ignored: frozenset[str] = _CUDNN,
    x: Callable[..., np.ndarray] = f32,
    bad: Callable[..., np.ndarray] = i64,
    cases: tuple[Case, ...] = (),
) -> OpDef:
    """Declares a one-input elementwise op: Out has X's shape, and X's dtype unless `out` is set.

    `reference` takes (x) for ops without attrs and (x, attrs) otherwise; `check` validates attrs.
    """

    def infer(x_type: TensorType, a: Any) -> Shape:
        if check is not None:
            check(a)
        return x_type.shape

    def expect(x_value: np.ndarray, a: Any) -> np.ndarray:
        y = reference(x_value) if attrs is NoAttrs else reference(x_value, a)
        return np.asarray(y).astype(out.numpy if out is not None else x_value.dtype)

    return OpDef(
        op_type=paddle_type,
        doc=f"Elementwise {formula}",
        inputs=(In("X"),),
        outputs=(Out("Out", out if out is not None else "T"),),
        types={"T": types},
        attrs=attrs,
        ignored_attrs=ignored,
        infer=infer,
        batch=ROWWISE,
        cases=(
            Case({"X": x(2, 3, 4)}, expect=expect),
            Case({"X": x()}, expect=expect),
            Case({"X": bad(2, 3)}, raises="input 'X': expected one of", code=Code.DTYPE_MISMATCH),
            *cases,
        ),
    )


# Values across every branch of the formulas below (lowering cases in float64 and float16).
_GRID: Final = np.linspace(-6.0, 6.0, 24).reshape(2, 3, 4)
_HALF_TOL: Final = 2e-3  # float16 cases: one rounding of difference


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.asarray(1 / (1 + np.exp(-x)))


erf = np.vectorize(math.erf, otypes=[np.float64])


@dataclass(frozen=True, slots=True)
class Relu6Attrs:
    threshold: float = 6.0  # an extra attr: dropped by 3.x exports, present in older ones


def _relu6_check(a: Relu6Attrs) -> None:
    _fixed("threshold", a.threshold, 6.0)


@dataclass(frozen=True, slots=True)
class LeakyReluAttrs:
    alpha: float = 0.02


def _leaky_relu_check(a: LeakyReluAttrs) -> None:
    require_finite("alpha", a.alpha)


def _leaky_relu(x: np.ndarray, a: LeakyReluAttrs) -> np.ndarray:
    return np.where(x > 0, x, a.alpha * x)


@dataclass(frozen=True, slots=True)
class EluAttrs:
    alpha: float = 1.0


def _elu_check(a: EluAttrs) -> None:
    require_finite("alpha", a.alpha)


def _elu(x: np.ndarray, a: EluAttrs) -> np.ndarray:
    return np.where(x > 0, x, a.alpha * np.expm1(x))


@dataclass(frozen=True, slots=True)
class GeluAttrs:
    approximate: bool = False


def _gelu(x: np.ndarray, a: GeluAttrs) -> np.ndarray:
    if a.approximate:
        return np.asarray(0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))))
    return np.asarray(0.5 * x * (1 + erf(x / math.sqrt(2))))


@dataclass(frozen=True, slots=True)
class SwishAttrs:
    beta: float = 1.0  # an extra attr: dropped by 3.x exports, present in older ones


def _swish_check(a: SwishAttrs) -> None:
    _fixed("beta", a.beta, 1.0)


@dataclass(frozen=True, slots=True)
class HardSigmoidAttrs:
    slope: float = 0.2  # paddle.nn.functional.hardsigmoid writes 1/6
    offset: float = 0.5


def _hard_sigmoid_check(a: HardSigmoidAttrs) -> None:
    require_finite("slope", a.slope)
    require_finite("offset", a.offset)


def _hard_sigmoid(x: np.ndarray, a: HardSigmoidAttrs) -> np.ndarray:
    return np.clip(a.slope * x + a.offset, 0, 1)


@dataclass(frozen=True, slots=True)
class HardSwishAttrs:
    threshold: float = 6.0
    scale: float = 6.0
    offset: float = 3.0


def _hard_swish_check(a: HardSwishAttrs) -> None:
    _fixed("threshold", a.threshold, 6.0)
    _fixed("scale", a.scale, 6.0)
    _fixed("offset", a.offset, 3.0)


def _hard_swish(x: np.ndarray, _a: HardSwishAttrs) -> np.ndarray:
    return np.asarray(x * np.clip(x + 3, 0, 6) / 6)


@dataclass(frozen=True, slots=True)
class SoftplusAttrs:
    beta: float = 1.0
    threshold: float = 20.0


def _softplus_check(a: SoftplusAttrs) -> None:
    # out = x where beta * x > threshold, else log(1 + exp(beta * x)) / beta.
    if not math.isfinite(a.beta) or a.beta == 0:
        raise AttrError(f"beta: expected a finite non-zero number, got {a.beta}")
    if not (math.isfinite(a.threshold) and a.threshold > 0):
        raise AttrError(f"threshold: expected a finite number > 0, got {a.threshold}")


def _softplus(x: np.ndarray, a: SoftplusAttrs) -> np.ndarray:
    bx = a.beta * x
    return np.where(bx > a.threshold, x, np.log1p(np.exp(np.minimum(bx, a.threshold))) / a.beta)


RELU = unary(
    "relu",
    "max(x, 0).",
    lambda x: np.maximum(x, 0),
    ignored=_CUDNN | _ONEDNN_DTYPE,
    cases=(
        Case({"X": _GRID}, expect=lambda x, a: np.maximum(x, 0)),
        Case({"X": _GRID.astype(np.float16)}, expect=lambda x, a: np.maximum(x, 0)),
    ),
)
RELU6 = unary(
    "relu6",
    "min(max(x, 0), 6).",
    lambda x, _a: np.clip(x, 0, 6),
    attrs=Relu6Attrs,
    check=_relu6_check,
    ignored=_ONEDNN,
    cases=(
        Case(
            {"X": f32(2)},
            {"threshold": 3.0},
            raises="threshold: expected 6.0",
            code=Code.ATTR_VALUE,
        ),
    ),
)
LEAKY_RELU = unary(
    "leaky_relu",
    "x if x > 0 else alpha * x.",
    _leaky_relu,
    attrs=LeakyReluAttrs,
    check=_leaky_relu_check,
    ignored=_ONEDNN,
    cases=(
        Case({"X": f32(2, 3)}, {"alpha": 0.1}, expect=_leaky_relu),
        Case({"X": _GRID}, {"alpha": 0.1}, expect=_leaky_relu),
        Case(
            {"X": f32(2)},
            {"alpha": math.inf},
            raises="alpha: expected a finite number, got inf",
            code=Code.ATTR_VALUE,
        ),
    ),
)
ELU = unary(
    "elu",
    "x if x > 0 else alpha * (exp(x) - 1).",
    _elu,
    attrs=EluAttrs,
    check=_elu_check,
    ignored=_ONEDNN,
    cases=(
        Case(
            {"X": f32(2)},
            {"alpha": math.nan},
            raises="alpha: expected a finite number",
            code=Code.ATTR_VALUE,
        ),
        Case({"X": _GRID}, {"alpha": 0.5}, expect=_elu),
        Case(
            {"X": _GRID.astype(np.float16)},
            {"alpha": 0.5},
            expect=_elu,
            rtol=_HALF_TOL,
            atol=_HALF_TOL,
        ),
    ),
)
GELU = unary(
    "gelu",
    "x * Phi(x) (tanh approximation if approximate).",
    _gelu,
    attrs=GeluAttrs,
    ignored=_ONEDNN | _ONEDNN_DTYPE,
    cases=(
        Case({"X": f32(2, 3)}, {"approximate": True}, expect=_gelu),
        Case({"X": _GRID}, expect=_gelu, rtol=1e-12, atol=1e-14),  # float64 erf to the last bits
        Case({"X": _GRID}, {"approximate": True}, expect=_gelu, rtol=1e-12, atol=1e-14),
        Case(
            {"X": _GRID.astype(np.float16)},
            expect=lambda x, a: _gelu(x, a).astype(x.dtype),
            rtol=_HALF_TOL,
            atol=_HALF_TOL,
        ),
    ),
)
SILU = unary("silu", "x * sigmoid(x).", lambda x: x * _sigmoid(x))
SWISH = unary(
    "swish",
    "x * sigmoid(x).",
    lambda x, _a: x * _sigmoid(x),
    attrs=SwishAttrs,
    check=_swish_check,
    ignored=_ONEDNN,
    cases=(Case({"X": f32(2)}, {"beta": 2.0}, raises="beta: expected 1.0", code=Code.ATTR_VALUE),),
)
SIGMOID = unary("sigmoid", "1 / (1 + exp(-x)).", _sigmoid, ignored=_CUDNN | _ONEDNN_DTYPE)
HARD_SIGMOID = unary(
    "hard_sigmoid",
    "clip(slope * x + offset, 0, 1).",
    _hard_sigmoid,
    attrs=HardSigmoidAttrs,
    check=_hard_sigmoid_check,
    ignored=frozenset(),
    cases=(
        Case({"X": f32(3)}, {"slope": 1 / 6, "offset": 0.5}, expect=_hard_sigmoid),
        Case({"X": _GRID}, {"slope": 1 / 6, "offset": 0.5}, expect=_hard_sigmoid),
        Case(
            {"X": f32(2)},
            {"slope": -math.inf},
            raises="slope: expected a finite number",
            code=Code.ATTR_VALUE,
        ),
    ),
)
HARD_SWISH = unary(
    "hard_swish",
    "x * min(max(x + 3, 0), 6) / 6; threshold, scale and offset must keep those values.",
    _hard_swish,
    attrs=HardSwishAttrs,
    check=_hard_swish_check,
    ignored=_ONEDNN,
    cases=(
        Case({"X": f32(2)}, {"threshold": 6.0, "scale": 6.0, "offset": 3.0}, expect=_hard_swish),
        Case({"X": _GRID}, expect=_hard_swish),
        Case({"X": _GRID.astype(np.float16)}, expect=_hard_swish, rtol=_HALF_TOL, atol=_HALF_TOL),
        Case({"X": f32(2)}, {"offset": 1.0}, raises="offset: expected 3.0", code=Code.ATTR_VALUE),
    ),
)
TANH = unary("tanh", "tanh(x).", np.tanh)
SOFTPLUS = unary(
    "softplus",
    "log(1 + exp(beta * x)) / beta, or x where beta * x > threshold.",
    _softplus,
    attrs=SoftplusAttrs,
    check=_softplus_check,
    cases=(
        Case({"X": f32(2, 3)}, {"beta": 2.0, "threshold": 10.0}, expect=_softplus),
        Case({"X": _GRID}, {"beta": 2.0, "threshold": 10.0}, expect=_softplus),
        Case(
            {"X": 4 * _GRID.astype(np.float32)}, {"beta": -2.0, "threshold": 3.0}, expect=_softplus
        ),
        Case({"X": np.array([-100, -20, 0, 19.5, 20.5, 100], np.float32)}, expect=_softplus),
        Case(
            {"X": f32(2)},
            {"beta": 0.0},
            raises="beta: expected a finite non-zero number, got 0.0",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {"X": f32(2)},
            {"threshold": -1.0},
            raises="threshold: expected a finite number > 0",
            code=Code.ATTR_VALUE,
        ),
    ),
)


@dataclass(frozen=True, slots=True)
class SoftmaxAttrs:
    axis: int = -1


def _check_softmax_axis(x: TensorType, axis: int) -> None:
    # NOTE: Paddle 3 takes a 0-D input with axis -1 or 0 (its one element maps to 1, or 0 for log).
    if x.rank == 0:
        if axis not in (-1, 0):
            raise AxisError(f"axis must be -1 or 0 for a 0-D input, got {axis}")
    else:
        norm_axis(axis, x.rank)


def _softmax_infer(x: TensorType, a: SoftmaxAttrs) -> Shape:
    _check_softmax_axis(x, a.axis)
    return x.shape


def _log_softmax_infer(x: TensorType, a: SoftmaxAttrs) -> Shape:
    _check_softmax_axis(x, a.axis)
    return x.shape


def _softmax(x: np.ndarray, a: SoftmaxAttrs) -> np.ndarray:
    if x.ndim == 0:
        return np.ones_like(x)
    e = np.exp(x - x.max(axis=a.axis, keepdims=True))
    return np.asarray(e / e.sum(axis=a.axis, keepdims=True))


def _softmax_cases(reference: Callable[..., np.ndarray]) -> tuple[Case, ...]:
    return (
        Case({"X": f32(2, 3, 4)}, expect=reference),
        Case({"X": f32(2, 3, 4)}, {"axis": 1}, expect=reference),
        Case({"X": f32()}, {"axis": 0}, expect=reference),
        Case({"X": _GRID}, {"axis": -3}, expect=reference),
        Case(
            {"X": _GRID.astype(np.float16)},
            {"axis": 0},
            expect=reference,
            rtol=_HALF_TOL,
            atol=_HALF_TOL,
        ),
        Case(
            {"X": f32(2, 3)},
            {"axis": 2},
            raises="axis must be in [-2, 2), got 2",
            code=Code.AXIS_INVALID,
        ),
        Case(
            {"X": f32()},
            {"axis": 1},
            raises="axis must be -1 or 0 for a 0-D input, got 1",
            code=Code.AXIS_INVALID,
        ),
        Case({"X": i64(2, 3)}, raises="input 'X': expected one of", code=Code.DTYPE_MISMATCH),
    )


def _softmax_batch(view: BatchView) -> int:
    axis = only(view, "X")
    return along(axis, view.attrs.axis, view.type("X").rank, "normalises over the batch dimension")


SOFTMAX = OpDef(
    op_type="softmax",
    doc="exp(x) / sum(exp(x)) along axis.",
    inputs=(In("X"),),
    outputs=(Out("Out"),),
    types={"T": FLOATS},
    attrs=SoftmaxAttrs,
    ignored_attrs=_CUDNN | _ONEDNN_DTYPE | {"data_format", "is_test"},
    infer=_softmax_infer,
    batch=_softmax_batch,
    cases=_softmax_cases(_softmax),
)

LOG_SOFTMAX = OpDef(
    op_type="log_softmax",
    doc="log(softmax(x)) along axis.",
    inputs=(In("X"),),
    outputs=(Out("Out"),),
    types={"T": FLOATS},
    attrs=SoftmaxAttrs,
    ignored_attrs=_ONEDNN,
    infer=_log_softmax_infer,
    batch=_softmax_batch,
    cases=_softmax_cases(lambda x, a: np.log(_softmax(x, a))),
)


@dataclass(frozen=True, slots=True)
class PreluAttrs:
    mode: str = "all"
    data_format: str = "NCHW"


def _prelu_infer(x: TensorType, alpha: TensorType, a: PreluAttrs) -> Shape:
    if a.data_format not in ("NCHW", "NHWC"):
        raise AttrError(f"data_format: expected 'NCHW' or 'NHWC', got {a.data_format!r}")
    size = product(alpha.shape)
    if a.mode == "all":
        merge_dim(size, 1, "mode 'all': elements of Alpha")
    elif a.mode == "channel":
        if x.rank < 2:
            raise AxisError(f"mode 'channel': expected X of rank >= 2, got {x.rank}")
        channels = x.shape[1] if a.data_format == "NCHW" else x.shape[-1]
        merge_dim(size, channels, "mode 'channel': elements of Alpha and channels of X")
    elif a.mode == "element":
        if alpha.rank != x.rank or x.rank == 0:
            raise ShapeError(
                f"mode 'element': expected Alpha of X's rank {x.rank} (>= 1), got dims {list(alpha.shape)}"
            )
        # Paddle compares the element counts past the batch dim, not the dims one by one.
        merge_dim(
            product(alpha.shape[1:]), product(x.shape[1:]), "mode 'element': elements per sample"
        )
    else:
        raise AttrError(f"mode: expected 'all', 'channel' or 'element', got {a.mode!r}")
    return x.shape


def _prelu(x: np.ndarray, alpha: np.ndarray, a: PreluAttrs) -> np.ndarray:
    if a.mode == "channel":
        shape = [1] * x.ndim
        shape[1 if a.data_format == "NCHW" else -1] = -1
        weight = alpha.reshape(shape)
    elif a.mode == "element":
        weight = alpha.reshape((1, *x.shape[1:]))
    else:
        weight = alpha.reshape(())
    return np.where(x > 0, x, weight * x).astype(x.dtype)


PRELU = OpDef(
    op_type="prelu",
    doc="x if x > 0 else alpha * x, with one alpha for all, per channel, or per element.",
    inputs=(In("X"), In("Alpha")),
    outputs=(Out("Out"),),
    types={"T": FLOATS},
    attrs=PreluAttrs,
    ignored_attrs=_ONEDNN | _ONEDNN_DTYPE | {"is_test"},
    infer=_prelu_infer,
    batch=batch_at("X"),
    cases=(
        Case({"X": f32(2, 3, 4), "Alpha": f32(1)}, expect=_prelu),
        Case({"X": f32(), "Alpha": f32(1)}, expect=_prelu),
        Case({"X": f32(2, 3, 4, 5), "Alpha": f32(3)}, {"mode": "channel"}, expect=_prelu),
        Case({"X": f32(2, 3, 4), "Alpha": f32(1, 3, 1, 1)}, {"mode": "channel"}, expect=_prelu),
        Case(
            {"X": f32(2, 4, 5, 3), "Alpha": f32(3)},
            {"mode": "channel", "data_format": "NHWC"},
            expect=_prelu,
        ),
        Case({"X": f32(2, 3, 4), "Alpha": f32(1, 3, 4)}, {"mode": "element"}, expect=_prelu),
        Case({"X": _GRID, "Alpha": np.array([0.1, 0.2, 0.3])}, {"mode": "channel"}, expect=_prelu),
        Case(
            {"X": _GRID.astype(np.float16), "Alpha": np.array([0.5, 2, -1, 0], np.float16)},
            {"mode": "channel", "data_format": "NHWC"},
            expect=_prelu,
        ),
        Case(  # Paddle reads Alpha's first numel(X[0]) elements; its dim 0 is not checked
            {"X": _GRID[0, 0], "Alpha": np.array([0.25, 9.0])},
            {"mode": "element"},
            expect=lambda x, alpha, a: np.where(x > 0, x, alpha[0] * x),
        ),
        Case(
            {"X": f32(2, 3), "Alpha": f32(2)},
            raises="mode 'all': elements of Alpha",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"X": f32(2, 3, 4), "Alpha": f32(4)},
            {"mode": "channel"},
            raises="elements of Alpha and channels of X: expected equal sizes, got 4 and 3",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"X": f32(3), "Alpha": f32(3)},
            {"mode": "channel"},
            raises="expected X of rank >= 2",
            code=Code.AXIS_INVALID,
        ),
        Case(
            {"X": f32(2, 3, 4), "Alpha": f32(3, 4)},
            {"mode": "element"},
            raises="expected Alpha of X's rank 3 (>= 1), got dims [3, 4]",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"X": f32(2, 3, 4), "Alpha": f32(1, 3, 5)},
            {"mode": "element"},
            raises="elements per sample: expected equal sizes, got 15 and 12",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"X": f32(2, 3), "Alpha": f32(1)},
            {"mode": "row"},
            raises="mode: expected 'all'",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {"X": f32(2, 3), "Alpha": f32(1)},
            {"data_format": "NCL"},
            raises="data_format: expected 'NCHW' or 'NHWC', got 'NCL'",
            code=Code.ATTR_VALUE,
        ),
    ),
)


@dataclass(frozen=True, slots=True)
class DropoutAttrs:
    dropout_prob: float = 0.5
    is_test: bool = False
    dropout_implementation: str = "downgrade_in_infer"
    fix_seed: bool = False  # extra attrs, used in training only
    seed: int = 0


_DROPOUT_IMPLEMENTATIONS: Final = ("downgrade_in_infer", "upscale_in_train")


def _dropout_infer(x: TensorType, _seed: TensorType | None, a: DropoutAttrs) -> Shape:
    # save_inference_model sets is_test; without it dropout would draw a random mask per run.
    if not a.is_test:
        raise AttrError("is_test: expected True in an inference program, got False")
    if not 0.0 <= a.dropout_prob <= 1.0:
        raise AttrError(f"dropout_prob: expected a value in [0, 1], got {a.dropout_prob}")
    if a.dropout_implementation not in _DROPOUT_IMPLEMENTATIONS:
        raise AttrError(
            f"dropout_implementation: expected one of {list(_DROPOUT_IMPLEMENTATIONS)}, "
            f"got {a.dropout_implementation!r}"
        )
    return x.shape


def _dropout(x: np.ndarray, _seed: np.ndarray | None, a: DropoutAttrs) -> np.ndarray:
    """Inference dropout: downgrade_in_infer scales by 1 - p, upscale_in_train is the identity."""
    if a.dropout_implementation == "upscale_in_train":
        return x.copy()
    return (x * (1 - a.dropout_prob)).astype(x.dtype)


_TEST = {"is_test": True}

DROPOUT = OpDef(
    op_type="dropout",
    doc="Inference dropout: x * (1 - dropout_prob) (downgrade_in_infer) or x (upscale_in_train).",
    inputs=(In("X"), In("Seed", DType.INT32, optional=True)),
    outputs=(Out("Out"), Out("Mask", DType.UINT8, unused=True)),
    types={"T": FLOATS},
    attrs=DropoutAttrs,
    infer=_dropout_infer,
    batch=ROWWISE,
    cases=(
        Case({"X": f32(2, 3)}, {**_TEST, "dropout_prob": 0.3}, expect=_dropout),
        Case({"X": _GRID}, {**_TEST, "dropout_prob": 0.3}, expect=_dropout),
        Case({"X": _GRID.astype(np.float16)}, {**_TEST, "dropout_prob": 0.1}, expect=_dropout),
        Case(
            {"X": f32()}, {**_TEST, "dropout_implementation": "upscale_in_train"}, expect=_dropout
        ),
        Case(
            {"X": f32(2, 3), "Seed": i32(1)},
            {**_TEST, "dropout_prob": 0.0, "fix_seed": True, "seed": 7},
            expect=_dropout,
        ),
        Case(
            {"X": f32(2)},
            {"dropout_prob": 0.5},
            raises="is_test: expected True",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {"X": f32(2)},
            {**_TEST, "dropout_prob": 1.5},
            raises="expected a value in [0, 1], got 1.5",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {"X": f32(2)},
            {**_TEST, "dropout_implementation": "scale"},
            raises="dropout_implementation: expected one of",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {"X": f32(2), "Seed": i64(1)},
            _TEST,
            raises="input 'Seed': expected int32, got int64",
            code=Code.DTYPE_MISMATCH,
        ),
    ),
)

OPS = (
    RELU,
    RELU6,
    LEAKY_RELU,
    ELU,
    GELU,
    SILU,
    SWISH,
    SIGMOID,
    HARD_SIGMOID,
    HARD_SWISH,
    TANH,
    SOFTPLUS,
    SOFTMAX,
    LOG_SOFTMAX,
    PRELU,
    DROPOUT,
)
