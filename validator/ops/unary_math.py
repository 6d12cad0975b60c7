"""Unary math (exp, log, sqrt...), pow, scale, clip, logical_not, and the dtype changers."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import numpy as np

from graph_proto.types import ALL, FLOATS, INDICES, INTEGERS, NUMERIC, DType, Shape
from graph_proto.types import dtype_from_vartype as vartype
from validator.diagnostics import Code
from validator.ops._batch import ROWWISE
from validator.ops._cases import boolean, f32, i32, i64, pos32
from validator.ops._def import AttrError, Case, DTypeError, In, OpDef, Out, ShapeError, TensorType
from validator.ops.activation import erf, require_finite, unary

_ONEDNN: Final = frozenset({"use_mkldnn", "use_onednn"})
_ONEDNN_DTYPE: Final = frozenset({"mkldnn_data_type", "onednn_data_type"})
_INT_LIKE: Final = INTEGERS | {DType.BOOL}
_INT32_LIMIT: Final = 2**31


def _scalar_tensor(t: TensorType, slot: str) -> None:
    """A tensor standing in for a scalar attribute (ScaleTensor, Min...): numeric, one element."""
    if t.dtype not in NUMERIC:
        raise DTypeError(f"input {slot!r}: expected a numeric tensor, got {t.dtype.label}")
    if t.known and t.numel() != 1:
        raise ShapeError(f"{slot}: expected a tensor of 1 element, got dims {list(t.shape)}")


def int_range(dtype: DType) -> tuple[int, int]:
    """The values an integer dtype holds."""
    bits = dtype.itemsize * 8
    if dtype == DType.UINT8:
        return 0, 2**bits - 1
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


def cpp_int(what: str, value: float, dtype: DType) -> int:
    """`static_cast<T>(float value)` for an integer T, where C++ defines it; else AttrError.

    The kernels read a float attribute as a C++ float. NOTE: C++ leaves an out-of-range
    conversion undefined; types narrower than int32 convert through int32 and keep the low
    bits, as Paddle's x86 kernels and onnxruntime's Cast do (scale -1.0 on uint8 multiplies
    by 255)."""
    # float32 rounding; past its range the value is infinite (and refused) either way
    v = float(np.float32(value)) if abs(value) < 2.0**128 else math.inf
    via = DType.INT64 if dtype == DType.INT64 else DType.INT32
    lo, hi = int_range(via)
    if not (math.isfinite(v) and lo <= math.trunc(v) <= hi):
        raise AttrError(
            f"{what}: expected a value that converts to {dtype.label} (in [{lo}, {hi}]), got {value}"
        )
    low, high = int_range(dtype)
    return (math.trunc(v) - low) % (high - low + 1) + low


def _int_operand(what: str, value: float, dtype: DType) -> None:
    """An attribute the kernel for an integer X converts to X's dtype must convert exactly."""
    if dtype not in FLOATS:
        cpp_int(what, value, dtype)


# Deterministic lowering cases: float64 and float16 math, integer X, Paddle's attribute casts.
_GRID: Final = np.linspace(-6.0, 6.0, 24).reshape(2, 3, 4)
_INTS: Final = np.arange(-6, 6).reshape(3, 4)
_FLT_MAX: Final = 3.4028234663852886e38
_HALF_TOL: Final = 2e-3  # float16 cases: one rounding of difference
_ERF_POINTS: Final = np.array(
    [0.0, 1e-300, 0.3, 0.46875, 0.47, 1.0, 2.5, 3.99, 4.0, 4.01, 5.5, 6.0, 9.0, 27.0, np.inf]
)


def _same(reference: Callable[[np.ndarray], np.ndarray]) -> Callable[..., np.ndarray]:
    return lambda x, _a: np.asarray(reference(x)).astype(x.dtype)


EXP = unary(
    "exp",
    "exp(x).",
    np.exp,
    cases=(
        Case({"X": _GRID}, expect=_same(np.exp)),
        Case({"X": _GRID.astype(np.float16)}, expect=_same(np.exp), rtol=_HALF_TOL, atol=_HALF_TOL),
    ),
)
LOG = unary("log", "natural log(x).", np.log, x=pos32)
SQRT = unary("sqrt", "sqrt(x).", np.sqrt, x=pos32)
RSQRT = unary("rsqrt", "1 / sqrt(x).", lambda x: 1 / np.sqrt(x), x=pos32)
SQUARE = unary(
    "square",
    "x * x.",
    np.square,
    types=FLOATS | INDICES,
    bad=boolean,
    cases=(Case({"X": _INTS.astype(np.int32)}, expect=_same(np.square)),),
)
ABS = unary(
    "abs",
    "|x|.",
    np.abs,
    types=FLOATS | INDICES,
    ignored=_ONEDNN,
    bad=boolean,
    cases=(
        Case({"X": _INTS}, expect=_same(np.abs)),
        Case({"X": _GRID.astype(np.float16)}, expect=_same(np.abs)),
    ),
)
FLOOR = unary(
    "floor",
    "floor(x); integers pass through.",
    np.floor,
    types=NUMERIC,
    bad=boolean,
    cases=(
        Case({"X": _INTS.astype(np.int32)}, expect=_same(np.floor)),
        Case({"X": _GRID / 2}, expect=_same(np.floor)),
    ),
)
CEIL = unary(
    "ceil",
    "ceil(x); integers pass through.",
    np.ceil,
    types=NUMERIC,
    bad=boolean,
    cases=(Case({"X": _INTS.astype(np.int8)}, expect=_same(np.ceil)),),
)
ERF = unary(
    "erf",
    "error function erf(x).",
    erf,
    ignored=frozenset(),
    cases=(
        # float64 has no onnxruntime Erf kernel: its lowering must still be exact to the last bits
        Case(
            {"X": np.concatenate([_ERF_POINTS, -_ERF_POINTS])},
            expect=_same(erf),
            rtol=2e-15,
            atol=0,
        ),
        Case({"X": _GRID.astype(np.float16)}, expect=_same(erf), rtol=_HALF_TOL, atol=_HALF_TOL),
    ),
)
SIN = unary("sin", "sin(x).", np.sin)
COS = unary("cos", "cos(x).", np.cos)
LOGICAL_NOT = unary(
    "logical_not",
    "not x, as bool (any non-zero x is true).",
    np.logical_not,
    types=ALL - {DType.UINT8},  # Paddle registers no uint8 kernel for logical ops
    out=DType.BOOL,
    ignored=frozenset(),
    x=boolean,
    bad=lambda *shape: i32(*shape).astype(np.uint8),
    cases=(
        Case({"X": i64(2, 3)}, expect=lambda x, _a: np.logical_not(x)),
        Case({"X": np.array([np.nan, -0.0, 0.0, 0.5, -np.inf])}, expect=lambda x, _a: x == 0),
        Case({"X": _INTS.astype(np.int8)}, expect=lambda x, _a: x == 0),
    ),
)
BITWISE_NOT = unary(
    "bitwise_not",
    "~x: logical not for bool, two's complement bitwise not for integers.",
    np.invert,
    types=INTEGERS | {DType.BOOL},
    ignored=frozenset(),
    x=i64,
    bad=f32,
    cases=(
        Case({"X": boolean(2, 3)}, expect=lambda x, _a: np.invert(x)),
        Case({"X": _INTS.astype(np.int32)}, expect=lambda x, _a: np.invert(x)),
        Case({"X": _INTS.astype(np.int8)}, expect=lambda x, _a: np.invert(x)),
        Case({"X": np.array([0, 1, 127, 128, 255], np.uint8)}, expect=lambda x, _a: np.invert(x)),
        Case(
            {"X": np.array([np.iinfo(np.int64).min, -1, 0, np.iinfo(np.int64).max])},
            expect=lambda x, _a: np.invert(x),
        ),
    ),
)


@dataclass(frozen=True, slots=True)
class PowAttrs:
    factor: float = 1.0


def _pow_infer(x: TensorType, factor: TensorType | None, a: PowAttrs) -> Shape:
    if factor is not None:
        _scalar_tensor(factor, "FactorTensor")  # replaces the attribute
    else:
        require_finite("factor", a.factor)
        _int_operand("factor", a.factor, x.dtype)
        if x.dtype not in FLOATS and cpp_int("factor", a.factor, x.dtype) < 0:
            # Eigen's integer pow loops forever on a negative exponent: Paddle never returns.
            raise AttrError(f"factor: expected >= 0 for {x.dtype.label} X, got {a.factor}")
    return x.shape


def _pow(x: np.ndarray, factor: np.ndarray | None, a: PowAttrs) -> np.ndarray:
    exponent = a.factor if factor is None else factor.reshape(()).item()
    return np.asarray(np.power(x, exponent)).astype(x.dtype)


POW = OpDef(
    op_type="pow",
    doc="x ** factor elementwise; a one-element FactorTensor replaces the factor attribute.",
    inputs=(In("X"), In("FactorTensor", None, optional=True)),
    outputs=(Out("Out"),),
    types={"T": FLOATS | INDICES},
    attrs=PowAttrs,
    infer=_pow_infer,
    batch=ROWWISE,
    cases=(
        Case({"X": pos32(2, 3)}, {"factor": 2.0}, expect=_pow),
        Case({"X": pos32()}, {"factor": 0.5}, expect=_pow),
        Case({"X": i64(4)}, {"factor": 3.0}, expect=_pow),
        Case({"X": pos32(2, 3), "FactorTensor": pos32(1)}, expect=_pow),
        # Paddle casts the factor to X's dtype: 2.5 is 2 for integers
        Case({"X": _INTS}, {"factor": 2.5}, expect=lambda x, f, a: x * x),
        Case({"X": _INTS.astype(np.int32)}, {"factor": 0.9}, expect=lambda x, f, a: x**0),
        Case({"X": _INTS}, {"factor": 1.0}, expect=lambda x, f, a: x),
        Case(  # integer powers wrap on overflow, exactly
            {"X": np.array([3, -3, 7, 2**40 + 1])}, {"factor": 41.0}, expect=lambda x, f, a: x**41
        ),
        Case(
            {"X": _INTS.astype(np.int32), "FactorTensor": np.array([2.7], np.float32)},
            expect=lambda x, f, a: x * x,
        ),
        Case(  # the kernel reads a FactorTensor as a C++ float, even a float64 one
            {"X": np.abs(_GRID), "FactorTensor": np.array(1 / 3)},
            expect=lambda x, f, a: np.abs(x) ** float(np.float32(1 / 3)),
            rtol=1e-14,
        ),
        Case(
            {"X": np.abs(_GRID).astype(np.float16)},
            {"factor": 1.5},
            expect=_pow,
            rtol=_HALF_TOL,
            atol=_HALF_TOL,
        ),
        Case(
            {"X": pos32(2)},
            {"factor": math.nan},
            raises="factor: expected a finite number",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {"X": pos32(2), "FactorTensor": pos32(2)},
            raises="FactorTensor: expected a tensor of 1 element, got dims [2]",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"X": pos32(2), "FactorTensor": boolean(1)},
            raises="expected a numeric tensor",
            code=Code.DTYPE_MISMATCH,
        ),
        Case({"X": boolean(2)}, raises="input 'X': expected one of", code=Code.DTYPE_MISMATCH),
        Case(
            {"X": _INTS},
            {"factor": -1.0},
            raises="factor: expected >= 0 for int64 X, got -1.0",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {"X": _INTS.astype(np.int32)},
            {"factor": 3e9},
            raises="factor: expected a value that converts to int32 (in [-2147483648, 2147483647])",
            code=Code.ATTR_VALUE,
        ),
    ),
)


@dataclass(frozen=True, slots=True)
class ScaleAttrs:
    scale: float = 1.0
    bias: float = 0.0
    bias_after_scale: bool = True


def _wrap(value: int, dtype: DType) -> int:
    """Two's-complement wrap of an exact integer into `dtype`, as the kernel's arithmetic does."""
    bits = dtype.itemsize * 8
    value &= (1 << bits) - 1
    signed = dtype != DType.UINT8
    return value - (1 << bits) if signed and value >= 1 << (bits - 1) else value


def _scale_value(x: TensorType, a: ScaleAttrs) -> tuple[int, ...] | None:
    """Values of an integer shape tensor after scale (x * 2, h + 1 in shape arithmetic)."""
    if x.value is None or x.dtype not in INTEGERS:
        return None
    if not all(v.is_integer() and abs(v) < _INT32_LIMIT for v in (a.scale, a.bias)):
        return None  # Paddle converts the factors to the int dtype; don't guess how
    s, b = int(a.scale), int(a.bias)
    exact = [(int(v) * s + b) if a.bias_after_scale else (int(v) + b) * s for v in x.value]
    return tuple(_wrap(v, x.dtype) for v in exact)


def _scale_infer(
    x: TensorType, scale: TensorType | None, bias: TensorType | None, a: ScaleAttrs
) -> Shape | TensorType:
    if scale is not None:
        _scalar_tensor(scale, "ScaleTensor")
    else:
        require_finite("scale", a.scale)
        _int_operand("scale", a.scale, x.dtype)
    if bias is not None:
        _scalar_tensor(bias, "BiasTensor")
    else:
        require_finite("bias", a.bias)
        _int_operand("bias", a.bias, x.dtype)
    if scale is None and bias is None and (value := _scale_value(x, a)) is not None:
        return TensorType(x.dtype, x.shape, value)
    return x.shape


def _scale(
    x: np.ndarray, scale: np.ndarray | None, bias: np.ndarray | None, a: ScaleAttrs
) -> np.ndarray:
    s = a.scale if scale is None else scale.reshape(()).item()
    b = a.bias if bias is None else bias.reshape(()).item()
    return np.asarray(x * s + b if a.bias_after_scale else (x + b) * s).astype(x.dtype)


SCALE = OpDef(
    op_type="scale",
    doc="x * scale + bias (or (x + bias) * scale); one-element tensors may replace scale and bias.",
    inputs=(
        In("X"),
        In("ScaleTensor", None, optional=True),
        In("BiasTensor", None, optional=True),
    ),
    outputs=(Out("Out"),),
    types={"T": NUMERIC},
    attrs=ScaleAttrs,
    ignored_attrs=_ONEDNN | _ONEDNN_DTYPE,
    infer=_scale_infer,
    batch=ROWWISE,
    cases=(
        Case({"X": f32(2, 3)}, {"scale": 2.0, "bias": 1.0}, expect=_scale),
        Case({"X": f32()}, {"scale": 0.5, "bias_after_scale": False, "bias": 1.0}, expect=_scale),
        Case({"X": i64(3)}, {"scale": 2.0, "bias": -1.0}, expect=_scale),
        Case({"X": f32(2, 3), "ScaleTensor": f32(1), "BiasTensor": i64(1)}, expect=_scale),
        Case({"X": f32(2, 3), "ScaleTensor": f32()}, {"scale": math.inf}, expect=_scale),
        # integer X: Paddle casts scale and bias to X's dtype (toward zero) and wraps
        Case({"X": _INTS}, {"scale": 2.5, "bias": 1.7}, expect=lambda x, s, b, a: x * 2 + 1),
        Case(
            {"X": _INTS.astype(np.int32)},
            {"scale": -2.5, "bias": -1.7, "bias_after_scale": False},
            expect=lambda x, s, b, a: (x - 1) * -2,
        ),
        Case(
            {"X": np.array([0, 1, 2, 200], np.uint8)},
            {"scale": -1.0, "bias": 3.0},
            expect=lambda x, s, b, a: x * np.uint8(255) + np.uint8(3),
        ),
        Case(
            {"X": _INTS, "ScaleTensor": np.array([2.7], np.float32), "BiasTensor": np.array(1.6)},
            expect=lambda x, s, b, a: x * 2 + 1,
        ),
        Case({"X": _GRID}, {"scale": 0.1, "bias": 0.3}, expect=_scale),
        Case({"X": _GRID.astype(np.float16)}, {"scale": 0.5, "bias": 1.0}, expect=_scale),
        Case(
            {"X": f32(2)},
            {"scale": math.inf},
            raises="scale: expected a finite number, got inf",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {"X": f32(2)},
            {"bias": math.nan},
            raises="bias: expected a finite number, got nan",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {"X": f32(2), "ScaleTensor": f32(2, 1)},
            raises="ScaleTensor: expected a tensor of 1 element, got dims [2, 1]",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(  # a uint8 X converts through int32: 1e10 has no defined conversion
            {"X": np.array([1, 2], np.uint8)},
            {"scale": 1e10},
            raises="scale: expected a value that converts to uint8",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {"X": _INTS},
            {"bias": -1e19},
            raises="bias: expected a value that converts to int64",
            code=Code.ATTR_VALUE,
        ),
        Case({"X": boolean(2)}, raises="input 'X': expected one of", code=Code.DTYPE_MISMATCH),
    ),
)


@dataclass(frozen=True, slots=True)
class ClipAttrs:
    min: float  # Paddle writes -FLT_MAX / FLT_MAX for an open side
    max: float


def _clip_infer(x: TensorType, lo: TensorType | None, hi: TensorType | None, a: ClipAttrs) -> Shape:
    # Min and Max tensors replace the attributes; Paddle checks min <= max in the kernel.
    if lo is not None:
        _scalar_tensor(lo, "Min")
    if hi is not None:
        _scalar_tensor(hi, "Max")
    if (lo is None and math.isnan(a.min)) or (hi is None and math.isnan(a.max)):
        raise AttrError(f"expected numbers for min and max, got min={a.min} and max={a.max}")
    if lo is None and hi is None and a.min > a.max:
        raise AttrError(f"expected min <= max, got min={a.min} and max={a.max}")
    # NOTE: a min below the integer type's range (-FLT_MAX: an open side) clips nothing.
    if lo is None and not (x.dtype not in FLOATS and a.min < int_range(x.dtype)[0]):
        _int_operand("min", a.min, x.dtype)
    if hi is None:
        _int_operand("max", a.max, x.dtype)
    return x.shape


def _clip(x: np.ndarray, lo: np.ndarray | None, hi: np.ndarray | None, a: ClipAttrs) -> np.ndarray:
    low = a.min if lo is None else lo.reshape(()).item()
    high = a.max if hi is None else hi.reshape(()).item()
    return np.asarray(np.minimum(np.maximum(x, low), high)).astype(x.dtype)


_OPEN: Final = 3.4028234663852886e38  # FLT_MAX, written for paddle.clip(x, max=...)

CLIP = OpDef(
    op_type="clip",
    doc="min(max(x, min), max); one-element Min and Max tensors replace the attributes.",
    inputs=(In("X"), In("Min", None, optional=True), In("Max", None, optional=True)),
    outputs=(Out("Out"),),
    types={"T": FLOATS | INDICES},
    attrs=ClipAttrs,
    ignored_attrs=_ONEDNN | _ONEDNN_DTYPE,
    infer=_clip_infer,
    batch=ROWWISE,
    cases=(
        Case({"X": f32(2, 3)}, {"min": -0.5, "max": 0.5}, expect=_clip),
        Case({"X": f32()}, {"min": -_OPEN, "max": 0.5}, expect=_clip),
        Case({"X": i32(4)}, {"min": 1.0, "max": 3.0}, expect=_clip),
        # an open side (-FLT_MAX) casts to int32's minimum, which clips nothing
        Case({"X": _INTS.astype(np.int32)}, {"min": -_FLT_MAX, "max": 2.0}, expect=_clip),
        Case(  # -FLT_MAX is -inf in float16
            {"X": _GRID.astype(np.float16)},
            {"min": -_FLT_MAX, "max": 0.5},
            expect=lambda x, lo, hi, a: np.minimum(x, np.float16(0.5)),
        ),
        Case({"X": _GRID}, {"min": -0.3, "max": _FLT_MAX}, expect=_clip),
        Case(
            {"X": _INTS, "Min": np.array([-1.7], np.float32), "Max": np.array(2.7)},
            {"min": 0.0, "max": 0.0},
            expect=lambda x, lo, hi, a: np.clip(x, -1, 2),
        ),
        Case(
            {"X": f32(2, 3), "Min": f32(1), "Max": pos32()},
            {"min": 1.0, "max": -1.0},  # ignored: the tensors win
            expect=_clip,
        ),
        Case(
            {"X": f32(2)},
            {"min": 1.0, "max": -1.0},
            raises="expected min <= max, got min=1.0",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {"X": f32(2)},
            {"min": math.nan, "max": 1.0},
            raises="expected numbers for min and max",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {"X": f32(2), "Max": f32(3)},
            {"min": 0.0, "max": 1.0},
            raises="Max: expected a tensor of 1 element, got dims [3]",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(  # FLT_MAX (paddle.clip's open max) has no defined conversion to int32
            {"X": _INTS.astype(np.int32)},
            {"min": 1.0, "max": _FLT_MAX},
            raises="max: expected a value that converts to int32",
            code=Code.ATTR_VALUE,
        ),
    ),
)


@dataclass(frozen=True, slots=True)
class CastAttrs:
    in_dtype: int  # VarType.Type numbers
    out_dtype: int


def _dtype_attr(what: str, value: int) -> DType:
    dtype = vartype(value)
    if dtype is None:
        known = ", ".join(f"{int(d)} ({d.label})" for d in DType)
        raise AttrError(f"{what}: expected a supported VarType number [{known}], got {value}")
    return dtype


def _cast_infer(x: TensorType, a: CastAttrs) -> TensorType:
    # NOTE: Paddle's kernel reads only out_dtype; in_dtype may be stale (AMP passes retype vars
    # after inserting casts), so it must name a dtype but need not equal X's.
    _dtype_attr("in_dtype", a.in_dtype)
    out = _dtype_attr("out_dtype", a.out_dtype)
    value = None
    if x.value is not None and x.dtype in _INT_LIKE and out in _INT_LIKE:
        # Shape arithmetic often casts int32 shapes to int64; keep the known values.
        value = tuple(np.array(x.value, dtype=x.dtype.numpy).astype(out.numpy).tolist())
    # Known dims of a shape (int32, so any integer type holds them) stay known.
    partial = x.partial if x.dtype in _INT_LIKE and out in (DType.INT32, DType.INT64) else None
    return TensorType(out, x.shape, value, partial=partial)


CAST = OpDef(
    op_type="cast",
    doc="Converts X to out_dtype (a VarType number); in_dtype is informational.",
    inputs=(In("X"),),
    outputs=(Out("Out"),),  # the dtype comes from out_dtype
    types={"T": ALL},
    attrs=CastAttrs,
    ignored_attrs=_ONEDNN | _ONEDNN_DTYPE,
    infer=_cast_infer,
    batch=ROWWISE,
    cases=(
        Case(
            {"X": f32(2, 3)},
            {"in_dtype": 5, "out_dtype": 3},
            expect=lambda x, a: x.astype(np.int64),
        ),
        Case({"X": i32()}, {"in_dtype": 2, "out_dtype": 0}, expect=lambda x, a: x.astype(bool)),
        Case(
            {"X": boolean(4)},
            {"in_dtype": 0, "out_dtype": 4},
            expect=lambda x, a: x.astype(np.float16),
        ),
        Case(
            {"X": i64(3)}, {"in_dtype": 5, "out_dtype": 20}, expect=lambda x, a: x.astype(np.uint8)
        ),
        # floats to integers truncate toward zero (narrower than int32: through int32, wrapping)
        Case(
            {"X": _GRID.astype(np.float32) / 2},
            {"in_dtype": 5, "out_dtype": 2},
            expect=lambda x, a: np.trunc(x).astype(np.int32),
        ),
        Case(
            {"X": np.array([-300.5, -2.7, 2.7, 255.9, 300.0])},
            {"in_dtype": 6, "out_dtype": 20},
            expect=lambda x, a: np.trunc(x).astype(np.int32).astype(np.uint8),
        ),
        Case(
            {"X": np.array([np.nan, -0.0, 0.0, 1e-30, -np.inf], np.float32)},
            {"in_dtype": 5, "out_dtype": 0},
            expect=lambda x, a: x != 0,
        ),
        Case(
            {"X": np.array([2**40 + 5, -(2**40) - 5, 2**31])},
            {"in_dtype": 3, "out_dtype": 2},
            expect=lambda x, a: x.astype(np.int32),
        ),
        Case(
            {"X": _GRID}, {"in_dtype": 6, "out_dtype": 4}, expect=lambda x, a: x.astype(np.float16)
        ),
        Case(
            {"X": np.array([True, False])},
            {"in_dtype": 0, "out_dtype": 3},
            expect=lambda x, a: x.astype(np.int64),
        ),
        Case(
            {"X": f32(2)},
            {"in_dtype": 5, "out_dtype": 23},
            raises="out_dtype: expected a supported",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {"X": f32(2)},
            {"in_dtype": 99, "out_dtype": 5},
            raises="in_dtype: expected a supported",
            code=Code.ATTR_VALUE,
        ),
    ),
)


def _assign_infer(x: TensorType | None, _a: object) -> TensorType:
    # X is "dispensable" in Paddle's proto, but an assign without X has nothing to copy.
    if x is None:
        raise ShapeError("expected an input X to copy, got an empty slot")
    return x  # the copy keeps any known values (assign in shape arithmetic)


ASSIGN = OpDef(
    op_type="assign",
    doc="Copies X, any dtype.",
    inputs=(In("X", optional=True),),
    outputs=(Out("Out"),),
    types={"T": ALL},
    infer=_assign_infer,
    batch=ROWWISE,
    cost=lambda *_: 0,
    cases=(
        Case({"X": f32(2, 3)}, expect=lambda x, a: x),
        Case({"X": i64()}, expect=lambda x, a: x),
        Case({"X": boolean(4)}, expect=lambda x, a: x),
        Case({}, raises="expected an input X to copy, got an empty slot", code=Code.SHAPE_MISMATCH),
    ),
)

OPS = (
    EXP,
    LOG,
    SQRT,
    RSQRT,
    SQUARE,
    ABS,
    FLOOR,
    CEIL,
    ERF,
    SIN,
    COS,
    LOGICAL_NOT,
    BITWISE_NOT,
    POW,
    SCALE,
    CLIP,
    CAST,
    ASSIGN,
)
