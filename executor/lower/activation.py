"""ONNX lowering of validator/ops/activation.py: Paddle's CPU formulas, node for node.

Where an ONNX op computes something else (Softplus has no beta/threshold, HardSwish rounds
differently) or onnxruntime has no kernel for a dtype (Elu, Erf, Softplus in float64), the
formula is spelled out with basic ops instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Final

import numpy as np

from executor.lower._builder import OnnxBuilder, Value
from graph_proto.types import DType
from validator.ops.activation import (
    DropoutAttrs,
    EluAttrs,
    GeluAttrs,
    HardSigmoidAttrs,
    LeakyReluAttrs,
    PreluAttrs,
    SoftmaxAttrs,
    SoftplusAttrs,
)

# NOTE: half types are computed in float32, with float attributes, and rounded once at the end,
# as Paddle's GPU (MPType) and oneDNN kernels do; onnxruntime has no bfloat16 math kernels, and
# CPU and CUDA then agree. (Paddle's Eigen CPU kernels round after each step: an ulp apart.)
_HALF: Final = frozenset({DType.FP16, DType.BF16})


def math_dtype(dtype: DType) -> DType:
    """The dtype math on `dtype` runs in: float32 for half types, else `dtype` itself."""
    return DType.FP32 if dtype in _HALF else dtype


def widen(b: OnnxBuilder, x: Value) -> tuple[str, DType]:
    """X in the dtype its math runs in, and that dtype."""
    t = math_dtype(x.dtype)
    return (b.cast(x.name, t) if t != x.dtype else x.name), t


def narrow(b: OnnxBuilder, y: str, dtype: DType) -> str:
    """The result of math done by `widen` back in the op's dtype."""
    return b.cast(y, dtype) if dtype in _HALF else y


def paddle_float(value: float) -> float:
    """A float attribute as Paddle's kernels read it: a C++ float."""
    return float(np.float32(value))


def attr_const(b: OnnxBuilder, value: float, dtype: DType) -> str:
    """A float attribute as a constant of the dtype the math on `dtype` runs in."""
    return b.scalar(paddle_float(value), math_dtype(dtype))


def unary_op(onnx_type: str) -> Callable[..., str]:
    """An emitter for a float op that is one ONNX op."""

    def emit(b: OnnxBuilder, x: Value, _a: object) -> str:
        v, _ = widen(b, x)
        return narrow(b, b.op(onnx_type, v), x.dtype)

    return emit


# W. J. Cody's rational Chebyshev approximations (SPECFUN CALERF), good to double precision.
_ERF_A: Final = (3.16112374387056560e00, 1.13864154151050156e02, 3.77485237685302021e02,
                 3.20937758913846947e03, 1.85777706184603153e-1)  # fmt: skip
_ERF_B: Final = (2.36012909523441209e01, 2.44024637934444173e02, 1.28261652607737228e03,
                 2.84423683343917062e03)  # fmt: skip
_ERF_C: Final = (5.64188496988670089e-1, 8.88314979438837594e00, 6.61191906371416295e01,
                 2.98635138197400131e02, 8.81952221241769090e02, 1.71204761263407058e03,
                 2.05107837782607147e03, 1.23033935479799725e03, 2.15311535474403846e-8)  # fmt: skip
_ERF_D: Final = (1.57449261107098347e01, 1.17693950891312499e02, 5.37181101862009858e02,
                 1.62138957456669019e03, 3.29079923573345963e03, 4.36261909014324716e03,
                 3.43936767414372164e03, 1.23033935480374942e03)  # fmt: skip
_ERF_P: Final = (3.05326634961232344e-1, 3.60344899949804439e-1, 1.25781726111229246e-1,
                 1.60837851487422766e-2, 6.58749161529837803e-4, 1.63153871373020978e-2)  # fmt: skip
_ERF_Q: Final = (2.56852019228982242e00, 1.87295284992346725e00, 5.27905102951428412e-1,
                 6.05183413124413191e-2, 2.33520497626869185e-3)  # fmt: skip


def _ratio(b: OnnxBuilder, t: str, num: tuple[float, ...], den: tuple[float, ...]) -> str:
    """Cody's nested form: (num[-1] t^n + num[0] t^(n-1) + ... + num[n-1]) / (t^n + den...)."""

    def c(value: float) -> str:
        return b.scalar(value, DType.FP64)

    n = len(den)
    xnum, xden = b.op("Mul", c(num[-1]), t), t
    for i in range(n - 1):
        xnum = b.op("Mul", b.op("Add", xnum, c(num[i])), t)
        xden = b.op("Mul", b.op("Add", xden, c(den[i])), t)
    return b.op("Div", b.op("Add", xnum, c(num[n - 1])), b.op("Add", xden, c(den[n - 1])))


def _erf_float64(b: OnnxBuilder, x: str) -> str:
    # NOTE: onnxruntime has no float64 Erf kernel, and float32 would lose half the digits.
    def c(value: float) -> str:
        return b.scalar(value, DType.FP64)

    y = b.op("Abs", x)
    ysq = b.op("Mul", y, y)
    small = b.op("Mul", x, _ratio(b, ysq, _ERF_A, _ERF_B))  # |x| <= 0.46875: x carries the sign
    middle = _ratio(b, y, _ERF_C, _ERF_D)  # erfc(y) * exp(y^2) for y <= 4
    inv = b.op("Reciprocal", ysq)
    tail = b.op("Mul", inv, _ratio(b, inv, _ERF_P, _ERF_Q))
    tail = b.op("Div", b.op("Sub", c(1 / math.sqrt(math.pi)), tail), y)  # the same, y > 4
    scaled = b.op("Where", b.op("LessOrEqual", y, c(4.0)), middle, tail)
    erfc = b.op("Mul", b.op("Exp", b.op("Neg", ysq)), scaled)
    large = b.op("Sub", c(1.0), erfc)
    signed = b.op("Where", b.op("Less", x, c(0.0)), b.op("Neg", large), large)
    return b.op("Where", b.op("LessOrEqual", y, c(0.46875)), small, signed)


def erf(b: OnnxBuilder, x: str, dtype: DType) -> str:
    """erf(x) for x in a math dtype (float32 or float64)."""
    return _erf_float64(b, x) if dtype == DType.FP64 else b.op("Erf", x)


def _relu6_emit(b: OnnxBuilder, x: Value, _a: object) -> str:
    v, t = widen(b, x)
    return narrow(b, b.op("Clip", v, b.scalar(0.0, t), b.scalar(6.0, t)), x.dtype)


def _leaky_relu_emit(b: OnnxBuilder, x: Value, a: LeakyReluAttrs) -> str:
    v, _ = widen(b, x)
    # ONNX's float attribute holds Paddle's C++ float exactly, for float64 X too.
    return narrow(b, b.op("LeakyRelu", v, alpha=paddle_float(a.alpha)), x.dtype)


def _elu_emit(b: OnnxBuilder, x: Value, a: EluAttrs) -> str:
    # Paddle: x < 0 ? alpha * (exp(x) - 1) : x (ONNX Elu has no float64 kernel in onnxruntime).
    v, t = widen(b, x)
    negative = b.op(
        "Mul", attr_const(b, a.alpha, x.dtype), b.op("Sub", b.op("Exp", v), b.scalar(1.0, t))
    )
    out = b.op("Where", b.op("Less", v, b.scalar(0.0, t)), negative, v)
    return narrow(b, out, x.dtype)


def _gelu_emit(b: OnnxBuilder, x: Value, a: GeluAttrs) -> str:
    v, t = widen(b, x)
    if a.approximate:
        # 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))). For float32 x^3 is
        # Pow(x, 3): onnxruntime's FastGelu fusion matches that form only (its Pow computes
        # x * x * x, as Paddle's cube does); with two Muls the eight ops ran apart (GPT: 16 Mul
        # against Paddle2ONNX's 3).
        if t == DType.FP32:
            cube = b.op("Pow", v, b.scalar(3.0, t))
        else:
            cube = b.op("Mul", b.op("Mul", v, v), v)
        inner = b.op("Add", v, b.op("Mul", b.scalar(0.044715, t), cube))
        phi = b.op("Tanh", b.op("Mul", b.scalar(math.sqrt(2 / math.pi), t), inner))
    elif t == DType.FP32:
        # 0.5 * x * (1 + erf(x / sqrt(2))), spelled with Div: onnxruntime's Gelu fusion matches
        # only that form (its fused kernel multiplies by 1/sqrt(2), as Paddle's does); with a
        # Mul the five ops ran apart (benchmarks/results/latency.md).
        phi = erf(b, b.op("Div", v, b.scalar(math.sqrt(2.0), t)), t)
    else:
        # 0.5 * x * (1 + erf(x * (1 / sqrt(2)))), Paddle's own order
        phi = erf(b, b.op("Mul", v, b.scalar(math.sqrt(0.5), t)), t)
    half_x = b.op("Mul", v, b.scalar(0.5, t))
    return narrow(b, b.op("Mul", half_x, b.op("Add", b.scalar(1.0, t), phi)), x.dtype)


def _silu_emit(b: OnnxBuilder, x: Value, _a: object) -> str:
    v, _ = widen(b, x)
    return narrow(b, b.op("Mul", v, b.op("Sigmoid", v)), x.dtype)


def _hard_sigmoid_emit(b: OnnxBuilder, x: Value, a: HardSigmoidAttrs) -> str:
    # Paddle: clip(x * slope + offset, 0, 1), ONNX HardSigmoid's formula; onnxruntime has it
    # (and fuses it) for float32 only, so other dtypes are spelled out.
    if x.dtype == DType.FP32:
        return b.op("HardSigmoid", x.name, alpha=a.slope, beta=a.offset)
    v, t = widen(b, x)
    line = b.op(
        "Add", b.op("Mul", v, attr_const(b, a.slope, x.dtype)), attr_const(b, a.offset, x.dtype)
    )
    return narrow(b, b.op("Clip", line, b.scalar(0.0, t), b.scalar(1.0, t)), x.dtype)


def _hard_swish_emit(b: OnnxBuilder, x: Value, _a: object) -> str:
    # Paddle: x * clip(x + 3, 0, 6) / 6. ONNX HardSwish computes x * clip(x / 6 + 0.5, 0, 1):
    # the same function, rounded differently by an ulp or so; for float32 onnxruntime fuses it
    # into the convolution before it (MobileNetV3: 1.4x faster), so float32 takes it.
    if x.dtype == DType.FP32:
        return b.op("HardSwish", x.name)
    v, t = widen(b, x)
    gate = b.op("Clip", b.op("Add", v, b.scalar(3.0, t)), b.scalar(0.0, t), b.scalar(6.0, t))
    return narrow(b, b.op("Div", b.op("Mul", v, gate), b.scalar(6.0, t)), x.dtype)


def _softplus_emit(b: OnnxBuilder, x: Value, a: SoftplusAttrs) -> str:
    # Paddle: beta * x > threshold ? x : log(1 + exp(beta * x)) / beta. ONNX Softplus has
    # neither beta nor threshold; the overflowing exp of the other branch is never selected.
    v, t = widen(b, x)
    beta = attr_const(b, a.beta, x.dtype)
    bx = b.op("Mul", v, beta)
    soft = b.op("Div", b.op("Log", b.op("Add", b.scalar(1.0, t), b.op("Exp", bx))), beta)
    linear = b.op("Greater", bx, attr_const(b, a.threshold, x.dtype))
    return narrow(b, b.op("Where", linear, v, soft), x.dtype)


def _softmax_like(onnx_type: str, zero_d: float) -> Callable[..., str]:
    def emit(b: OnnxBuilder, x: Value, a: SoftmaxAttrs) -> str:
        if x.rank == 0:
            # NOTE: Paddle fills a 0-D softmax with 1 (log_softmax with 0), even for nan or inf.
            return narrow(b, b.op("Identity", attr_const(b, zero_d, x.dtype)), x.dtype)
        v, _ = widen(b, x)
        return narrow(b, b.op(onnx_type, v, axis=a.axis), x.dtype)

    return emit


def _prelu_weight(b: OnnxBuilder, x: Value, alpha: str, a: PreluAttrs) -> str:
    """Alpha shaped to broadcast against X the way Paddle's kernel indexes it."""
    if a.mode == "all":
        return b.op("Reshape", alpha, b.ints([]))
    if a.mode == "channel":
        trailing = [1] * (x.rank - 2) if a.data_format == "NCHW" else []
        return b.op("Reshape", alpha, b.ints([-1, *trailing]))
    # NOTE: 'element' reads Alpha's first numel(X[0]) elements; Alpha's dim 0 is not checked.
    per_sample = b.op("Gather", b.op("Flatten", alpha, axis=1), b.ints([0]), axis=0)
    if all(d >= 0 for d in x.shape[1:]):
        target = b.ints([1, *x.shape[1:]])
    else:
        target = b.op("Concat", b.ints([1]), b.op("Shape", x.name, start=1), axis=0)
    return b.op("Reshape", per_sample, target)


def _prelu_emit(b: OnnxBuilder, x: Value, alpha: Value, a: PreluAttrs) -> str:
    v, _ = widen(b, x)
    w, _ = widen(b, alpha)
    return narrow(b, b.op("PRelu", v, _prelu_weight(b, x, w, a)), x.dtype)


def _dropout_emit(b: OnnxBuilder, x: Value, _seed: Value | None, a: DropoutAttrs) -> str:
    if a.dropout_implementation == "upscale_in_train":
        return b.op("Identity", x.name)
    # NOTE: the kernel multiplies by static_cast<T>(1.0f - dropout_prob), computed in float.
    v, _ = widen(b, x)
    keep = float(np.float32(1.0) - np.float32(a.dropout_prob))
    return narrow(b, b.op("Mul", v, attr_const(b, keep, x.dtype)), x.dtype)


EMITTERS: Final = {
    "relu": unary_op("Relu"),
    "relu6": _relu6_emit,
    "leaky_relu": _leaky_relu_emit,
    "elu": _elu_emit,
    "gelu": _gelu_emit,
    "silu": _silu_emit,
    "swish": _silu_emit,  # beta must be 1 (validator)
    "sigmoid": unary_op("Sigmoid"),
    "hard_sigmoid": _hard_sigmoid_emit,
    "hard_swish": _hard_swish_emit,
    "tanh": unary_op("Tanh"),
    "softplus": _softplus_emit,
    "softmax": _softmax_like("Softmax", 1.0),
    "log_softmax": _softmax_like("LogSoftmax", 0.0),
    "prelu": _prelu_emit,
    "dropout": _dropout_emit,
}
