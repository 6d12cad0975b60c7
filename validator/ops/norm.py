"""Normalization layers for inference: batch_norm (running statistics), layer, group, instance."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import numpy as np

from graph_proto.types import FLOATS, DType, Shape
from validator.diagnostics import Code
from validator.ops._batch import batch_at, only
from validator.ops._cases import f32, pos32
from validator.ops._def import (
    AttrError,
    AxisError,
    BatchView,
    Case,
    Couples,
    EmptyDimError,
    In,
    OpDef,
    Out,
    ShapeError,
    TensorType,
)
from validator.ops._shape import merge_dim, product, require_rank
from validator.ops.nn import case, channel_last, layout

LAYOUTS: Final = ("NCHW", "NHWC")
# Paddle's op checkers compare float32 values: epsilon=0.001 written as a float passes.
EPS_MAX: Final = float(np.float32(0.001))
NORM_FLOPS: Final = 7  # mean, centre, square, variance, normalize, scale, shift per element
FLAGS: Final = frozenset({"use_mkldnn", "use_cudnn", "mkldnn_data_type", "is_test"})


@dataclass(frozen=True, slots=True)
class BatchNormAttrs:
    epsilon: float = 1e-5
    momentum: float = 0.9  # training only
    data_layout: str = "NCHW"
    is_test: bool = False
    use_global_stats: bool = False
    trainable_statistics: bool = False


@dataclass(frozen=True, slots=True)
class LayerNormAttrs:
    epsilon: float = 1e-5
    begin_norm_axis: int = 1


@dataclass(frozen=True, slots=True)
class GroupNormAttrs:
    epsilon: float = 1e-5
    groups: int = 1
    data_layout: str = "NCHW"


@dataclass(frozen=True, slots=True)
class InstanceNormAttrs:
    epsilon: float = 1e-5


def _epsilon(value: float, high: float | None = None) -> None:
    if not value >= 0 or (high is not None and value > high):
        bound = f"in [0, {high:g}]" if high is not None else ">= 0"
        raise AttrError(f"epsilon must be {bound}, got {value:g}")


def _per_channel(c: int, what: str, **params: TensorType | None) -> int:
    """Scale, Bias (and Mean, Variance) must be 1-D of size c; returns c, merged with theirs."""
    for name, t in params.items():
        if t is not None:
            require_rank(t, (1,), name)
            c = merge_dim(c, t.shape[0], f"{name} and the {what}")
    return c


def _batch_norm_infer(
    x: TensorType,
    scale: TensorType | None,
    bias: TensorType | None,
    mean: TensorType,
    variance: TensorType,
    _momentum: TensorType | None,
    a: BatchNormAttrs,
) -> Shape:
    # NOTE: Paddle uses the running Mean/Variance only when is_test (and not trainable_statistics)
    # or use_global_stats; otherwise it normalizes by batch statistics and updates MeanOut.
    if not (a.use_global_stats or (a.is_test and not a.trainable_statistics)):
        raise AttrError(
            f"expected is_test=True (without trainable_statistics) or use_global_stats=True in an inference program, got is_test={a.is_test}, trainable_statistics={a.trainable_statistics}, use_global_stats={a.use_global_stats}"
        )
    _epsilon(a.epsilon, EPS_MAX)
    last = channel_last(a.data_layout, "data_layout", LAYOUTS)
    require_rank(x, range(2, 6), "X")
    if 0 in x.shape:
        raise EmptyDimError(f"expected no zero-size dims, got {list(x.shape)}")
    c = x.shape[-1] if last else x.shape[1]
    _per_channel(c, "channels", Scale=scale, Bias=bias, Mean=mean, Variance=variance)
    return x.shape


def _layer_norm_infer(
    x: TensorType, scale: TensorType | None, bias: TensorType | None, a: LayerNormAttrs
) -> Shape:
    if not 1 <= a.begin_norm_axis < x.rank:
        raise AxisError(
            f"begin_norm_axis must be in [1, {x.rank - 1}] for an input of rank {x.rank}, got {a.begin_norm_axis}"
        )
    _epsilon(a.epsilon, EPS_MAX)
    normalized = x.shape[a.begin_norm_axis :]
    if 0 in normalized:
        raise EmptyDimError(f"expected non-empty normalized dims, got {list(x.shape)}")
    _per_channel(product(normalized), "normalized size", Scale=scale, Bias=bias)
    return x.shape


def _group_norm_infer(
    x: TensorType, scale: TensorType | None, bias: TensorType | None, a: GroupNormAttrs
) -> Shape:
    _epsilon(a.epsilon)
    if a.groups < 1:
        raise AttrError(f"groups must be >= 1, got {a.groups}")
    last = channel_last(a.data_layout, "data_layout", LAYOUTS)
    require_rank(x, range(2, 6), "X")
    n, c, sizes = layout(x.shape, last)
    if c == 0 or 0 in sizes:
        raise EmptyDimError(f"expected non-empty channel and spatial dims, got {list(x.shape)}")
    c = _per_channel(
        c, "channels", Scale=scale, Bias=bias
    )  # Paddle fills an unknown C from Scale/Bias
    if c >= 0 and c % a.groups:
        raise ShapeError(f"expected channels divisible by groups {a.groups}, got {c}")
    return (n, *sizes, c) if last else (n, c, *sizes)


def _instance_norm_infer(
    x: TensorType, scale: TensorType | None, bias: TensorType | None, a: InstanceNormAttrs
) -> Shape:
    _epsilon(a.epsilon)
    require_rank(x, range(2, 6), "X")
    if 0 in x.shape:
        raise EmptyDimError(f"expected no zero-size dims, got {list(x.shape)}")
    _per_channel(x.shape[1], "channels", Scale=scale, Bias=bias)
    return x.shape


def _flops(per_element: int) -> Callable[..., int]:
    def cost(x: TensorType, *_rest: object) -> int:
        return per_element * x.numel()

    return cost


# numpy references ------------------------------------------------------------------------------


def _normalize(x: np.ndarray, axes: tuple[int, ...], eps: float) -> np.ndarray:
    x = x.astype(np.float64)
    return np.asarray((x - x.mean(axes, keepdims=True)) / np.sqrt(x.var(axes, keepdims=True) + eps))


def _affine(
    y: np.ndarray, shape: Shape, *, scale: np.ndarray | None, bias: np.ndarray | None
) -> np.ndarray:
    if scale is not None:
        y = y * scale.reshape(shape)
    return y if bias is None else y + bias.reshape(shape)


def _channel_shape(x: np.ndarray, axis: int) -> Shape:
    return tuple(-1 if i == axis % x.ndim else 1 for i in range(x.ndim))


def _batch_norm_ref(
    x: np.ndarray, scale: np.ndarray | None, bias: np.ndarray | None, mean: np.ndarray,
    var: np.ndarray, _m: np.ndarray | None, a: BatchNormAttrs,
) -> np.ndarray:  # fmt: skip
    shape = _channel_shape(x, -1 if a.data_layout == "NHWC" else 1)
    y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + a.epsilon)
    return _affine(y, shape, scale=scale, bias=bias).astype(x.dtype)


def _layer_norm_ref(
    x: np.ndarray, scale: np.ndarray | None, bias: np.ndarray | None, a: LayerNormAttrs
) -> np.ndarray:
    axes = tuple(range(a.begin_norm_axis, x.ndim))
    y = _normalize(x, axes, a.epsilon)
    return _affine(y, x.shape[a.begin_norm_axis :], scale=scale, bias=bias).astype(x.dtype)


def _group_norm_ref(
    x: np.ndarray, scale: np.ndarray | None, bias: np.ndarray | None, a: GroupNormAttrs
) -> np.ndarray:
    xs = np.moveaxis(x, -1, 1) if a.data_layout == "NHWC" else x
    grouped = xs.reshape(xs.shape[0], a.groups, -1)
    y = _normalize(grouped, (2,), a.epsilon).reshape(xs.shape)
    y = _affine(y, _channel_shape(xs, 1), scale=scale, bias=bias)
    return (np.moveaxis(y, 1, -1) if a.data_layout == "NHWC" else y).astype(x.dtype)


def _instance_norm_ref(
    x: np.ndarray, scale: np.ndarray | None, bias: np.ndarray | None, a: InstanceNormAttrs
) -> np.ndarray:
    y = _normalize(x, tuple(range(2, x.ndim)), a.epsilon)
    return _affine(y, _channel_shape(x, 1), scale=scale, bias=bias).astype(x.dtype)


def _cases(
    ref: Callable[..., np.ndarray], x: Shape, c: int | None, raises: str, code: Code | None,
    attrs: dict[str, object], **extra: np.ndarray,
) -> Case:  # fmt: skip
    inputs = {"X": f32(*x), **extra}
    if c is not None:
        inputs |= {"Scale": f32(c), "Bias": f32(c)}
    return case(inputs, ref, raises, code, attrs)


def _bn(x: Shape, c: int, raises: str = "", code: Code | None = None, **attrs: object) -> Case:
    """A batch_norm case with per-channel params of size c (is_test unless told otherwise)."""
    stats = {"Mean": f32(c), "Variance": pos32(c)}
    return _cases(_batch_norm_ref, x, c, raises, code, {"is_test": True} | attrs, **stats)


def _ln(
    x: Shape, c: int | None, raises: str = "", code: Code | None = None, **attrs: object
) -> Case:
    return _cases(_layer_norm_ref, x, c, raises, code, attrs)


def _gn(
    x: Shape, c: int | None, raises: str = "", code: Code | None = None, **attrs: object
) -> Case:
    return _cases(_group_norm_ref, x, c, raises, code, attrs)


def _in(
    x: Shape, c: int | None, raises: str = "", code: Code | None = None, **attrs: object
) -> Case:
    return _cases(_instance_norm_ref, x, c, raises, code, attrs)


# fmt: off
_BATCH_NORM_CASES: Final = (
    _bn((2, 3, 4, 4), 3),
    _bn((2, 4, 4, 3), 3, data_layout="NHWC", is_test=False, use_global_stats=True, epsilon=0.001),
    _bn((5, 3), 3),
    _bn((2, 3, 2, 2, 2), 3, momentum=0.5),
    _bn((2, 3, 4, 4), 3, "expected is_test=True (without trainable_statistics) or use_global_stats=True", Code.ATTR_VALUE,
        is_test=False),
    _bn((2, 3, 4, 4), 3, "got is_test=True, trainable_statistics=True", Code.ATTR_VALUE, trainable_statistics=True),
    _bn((2, 3, 4, 4), 4, "Scale and the channels: expected equal sizes, got 3 and 4", Code.SHAPE_MISMATCH),
    _bn((2, 3, 4, 4), 3, "epsilon must be in [0, 0.001], got 0.01", Code.ATTR_VALUE, epsilon=0.01),
    _bn((3,), 3, "X: expected rank 2..5, got 1", Code.AXIS_INVALID),
    _bn((0, 3), 3, "expected no zero-size dims, got [0, 3]", Code.EMPTY_DIM),
    _bn((2, 3, 4, 4), 3, "data_layout must be one of ['NCHW', 'NHWC'], got 'AnyLayout'", Code.ATTR_VALUE,
        data_layout="AnyLayout"),
    _bn((2, 2, 3, 3, 4), 4, data_layout="NHWC"),
    Case({"X": f32(2, 3, 4, 4), "Mean": f32(3), "Variance": pos32(3)}, {"is_test": True}, expect=_batch_norm_ref),
    Case({"X": f32(2, 3, 4).astype(np.float16), "Scale": f32(3), "Bias": f32(3), "Mean": f32(3),
          "Variance": pos32(3)}, {"is_test": True}, expect=_batch_norm_ref, rtol=2e-3, atol=2e-3),
)
_LAYER_NORM_CASES: Final = (
    _ln((2, 3, 4), 12),
    _ln((2, 3, 4), None, begin_norm_axis=2),
    _ln((2, 3, 4), 4, begin_norm_axis=2, epsilon=0.0),
    _ln((2, 3, 4), 12, "begin_norm_axis must be in [1, 2] for an input of rank 3, got 0", Code.AXIS_INVALID,
        begin_norm_axis=0),
    _ln((2, 3, 4), 1, "got 3", Code.AXIS_INVALID, begin_norm_axis=3),
    _ln((2, 3, 4), 4, "Scale and the normalized size: expected equal sizes, got 12 and 4", Code.SHAPE_MISMATCH),
    _ln((2, 3, 4), 12, "epsilon must be in [0, 0.001], got 0.5", Code.ATTR_VALUE, epsilon=0.5),
    _ln((2, 0, 4), 0, "expected non-empty normalized dims", Code.EMPTY_DIM),
    _ln((2, 3, 4, 5), 60, begin_norm_axis=1),
    Case({"X": f32(2, 3, 8), "Scale": f32(8)}, {"begin_norm_axis": 2}, expect=_layer_norm_ref),
    Case({"X": f32(2, 3, 8), "Bias": f32(24)}, expect=_layer_norm_ref),
    Case({"X": f32(2, 3, 8).astype(np.float16), "Scale": f32(8), "Bias": f32(8)}, {"begin_norm_axis": 2},
         expect=_layer_norm_ref, rtol=2e-3, atol=2e-3),
)
_GROUP_NORM_CASES: Final = (
    _gn((2, 4, 3, 3), 4, groups=2),
    _gn((2, 3, 3, 6), 6, groups=3, data_layout="NHWC", epsilon=0.5),
    _gn((2, 6, 5), None, groups=6),
    _gn((2, 4, 3, 3), 4, "expected channels divisible by groups 3, got 4", Code.SHAPE_MISMATCH, groups=3),
    _gn((2, 4, 3, 3), 4, "expected channels divisible by groups 8, got 4", Code.SHAPE_MISMATCH, groups=8),
    _gn((2, 4, 3, 3), 4, "groups must be >= 1, got 0", Code.ATTR_VALUE, groups=0),
    _gn((2, 4, 3, 3), 2, "Scale and the channels: expected equal sizes, got 4 and 2", Code.SHAPE_MISMATCH, groups=2),
    _gn((2, 4, 0, 3), 4, "expected non-empty channel and spatial dims", Code.EMPTY_DIM, groups=2),
    _gn((2, 4, 3, 3), 4, "epsilon must be >= 0, got -1", Code.ATTR_VALUE, epsilon=-1.0),
    _gn((2, 2, 3, 2, 6), 6, groups=3, data_layout="NHWC"),
    _gn((3, 6), None, groups=2),
)
_INSTANCE_NORM_CASES: Final = (
    _in((2, 3, 4, 4), 3),
    _in((2, 3, 5), None, epsilon=0.01),
    _in((2, 3, 2, 2, 2), 3),
    Case({"X": f32(2, 3, 4, 4), "Bias": f32(4)}, raises="Bias and the channels: expected equal sizes, got 3 and 4", code=Code.SHAPE_MISMATCH),
    _in((2, 3, 0, 4), 3, "expected no zero-size dims", Code.EMPTY_DIM),
    _in((3,), 3, "X: expected rank 2..5, got 1", Code.AXIS_INVALID),
    _in((2, 3, 4, 4), 3, "epsilon must be >= 0, got -0.5", Code.ATTR_VALUE, epsilon=-0.5),
    _in((4, 3), 3),
    Case({"X": f32(2, 3, 4, 4), "Scale": f32(3)}, expect=_instance_norm_ref),
    Case({"X": f32(2, 3, 5).astype(np.float16), "Scale": f32(3), "Bias": f32(3)}, expect=_instance_norm_ref,
         rtol=2e-3, atol=2e-3),
)
# fmt: on


def _layer_norm_batch(view: BatchView) -> int:
    """Rows stay apart while the batch axis is before the normalised ones. (batch_norm may use
    batch_at: training-mode statistics are refused by its shape rule.)"""
    axis = only(view, "X")
    if axis >= view.attrs.begin_norm_axis:
        raise Couples("normalises over the batch dimension")
    return axis


BATCH_NORM = OpDef(
    op_type="batch_norm",
    doc="Normalizes each channel by its running Mean and Variance (inference mode), then scales and shifts.",
    inputs=(
        In("X"),
        In("Scale", "U", optional=True),
        In("Bias", "U", optional=True),
        In("Mean", "U"),
        In("Variance", "U"),
        In("MomentumTensor", None, optional=True),
    ),
    outputs=(
        Out("Y"),
        Out("MeanOut", "U", unused=True, inplace_of="Mean"),
        Out("VarianceOut", "U", unused=True, inplace_of="Variance"),
        Out("SavedMean", "U", unused=True),
        Out("SavedVariance", "U", unused=True),
        Out("ReserveSpace", DType.UINT8, unused=True),
    ),
    types={"T": FLOATS, "U": FLOATS},
    attrs=BatchNormAttrs,
    ignored_attrs=FLAGS - {"is_test"},
    infer=_batch_norm_infer,
    batch=batch_at("X"),
    cost=_flops(2),  # running statistics fold into one multiply-add
    cases=_BATCH_NORM_CASES,
)

LAYER_NORM = OpDef(
    op_type="layer_norm",
    doc="Normalizes over the dims from begin_norm_axis on, then scales and shifts by the flattened Scale/Bias.",
    inputs=(In("X"), In("Scale", "U", optional=True), In("Bias", "U", optional=True)),
    outputs=(Out("Y"), Out("Mean", "U", unused=True), Out("Variance", "U", unused=True)),
    types={"T": FLOATS, "U": FLOATS},
    attrs=LayerNormAttrs,
    ignored_attrs=FLAGS,
    infer=_layer_norm_infer,
    batch=_layer_norm_batch,
    cost=_flops(NORM_FLOPS),
    cases=_LAYER_NORM_CASES,
)

GROUP_NORM = OpDef(
    op_type="group_norm",
    doc="Normalizes over each group of channels (and all spatial dims), then scales and shifts per channel.",
    inputs=(In("X"), In("Scale", "U", optional=True), In("Bias", "U", optional=True)),
    outputs=(Out("Y"), Out("Mean", "U", unused=True), Out("Variance", "U", unused=True)),
    types={"T": FLOATS, "U": FLOATS},
    attrs=GroupNormAttrs,
    ignored_attrs=FLAGS,
    infer=_group_norm_infer,
    batch=batch_at("X"),
    cost=_flops(NORM_FLOPS),
    cases=_GROUP_NORM_CASES,
)

INSTANCE_NORM = OpDef(
    op_type="instance_norm",
    doc="Normalizes each channel of each sample over its spatial dims (NCHW only), then scales and shifts.",
    inputs=(In("X"), In("Scale", "U", optional=True), In("Bias", "U", optional=True)),
    outputs=(Out("Y"), Out("SavedMean", "U", unused=True), Out("SavedVariance", "U", unused=True)),
    types={"T": FLOATS, "U": FLOATS},
    attrs=InstanceNormAttrs,
    ignored_attrs=FLAGS,
    infer=_instance_norm_infer,
    batch=batch_at("X"),
    cost=_flops(NORM_FLOPS),
    cases=_INSTANCE_NORM_CASES,
)

OPS = (BATCH_NORM, LAYER_NORM, GROUP_NORM, INSTANCE_NORM)
