"""Unary math (exp, log, sqrt...), pow, scale, clip, logical_not, and the dtype changers."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import numpy as np

from graph_proto.types import ALL, FLOATS, INDICES, INTEGERS, NUMERIC, DType, Shape
from graph_proto.types import dtype_from_vartype as vartype
from validator.diagnostics import Code
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


EXP = unary("exp", "exp(x).", np.exp)
LOG = unary("log", "natural log(x).", np.log, x=pos32)
SQRT = unary("sqrt", "sqrt(x).", np.sqrt, x=pos32)
RSQRT = unary("rsqrt", "1 / sqrt(x).", lambda x: 1 / np.sqrt(x), x=pos32)
SQUARE = unary("square", "x * x.", np.square, types=FLOATS | INDICES, bad=boolean)
ABS = unary("abs", "|x|.", np.abs, types=FLOATS | INDICES, ignored=_ONEDNN, bad=boolean)
FLOOR = unary("floor", "floor(x); integers pass through.", np.floor, types=NUMERIC, bad=boolean)
CEIL = unary("ceil", "ceil(x); integers pass through.", np.ceil, types=NUMERIC, bad=boolean)
ERF = unary("erf", "error function erf(x).", erf, ignored=frozenset())
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
    cases=(Case({"X": i64(2, 3)}, expect=lambda x, _a: np.logical_not(x)),),
)


@dataclass(frozen=True, slots=True)
class PowAttrs:
    factor: float = 1.0


def _pow_infer(x: TensorType, factor: TensorType | None, a: PowAttrs) -> Shape:
    if factor is not None:
        _scalar_tensor(factor, "FactorTensor")  # replaces the attribute
    else:
        require_finite("factor", a.factor)
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
    cases=(
        Case({"X": pos32(2, 3)}, {"factor": 2.0}, expect=_pow),
        Case({"X": pos32()}, {"factor": 0.5}, expect=_pow),
        Case({"X": i64(4)}, {"factor": 3.0}, expect=_pow),
        Case({"X": pos32(2, 3), "FactorTensor": pos32(1)}, expect=_pow),
        Case({"X": pos32(2)}, {"factor": math.nan}, raises="factor: expected a finite number"),
        Case(
            {"X": pos32(2), "FactorTensor": pos32(2)},
            raises="FactorTensor: expected a tensor of 1 element, got dims [2]",
        ),
        Case({"X": pos32(2), "FactorTensor": boolean(1)}, raises="expected a numeric tensor"),
        Case({"X": boolean(2)}, raises="input 'X': expected one of", code=Code.DTYPE_MISMATCH),
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
    if bias is not None:
        _scalar_tensor(bias, "BiasTensor")
    else:
        require_finite("bias", a.bias)
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
    cases=(
        Case({"X": f32(2, 3)}, {"scale": 2.0, "bias": 1.0}, expect=_scale),
        Case({"X": f32()}, {"scale": 0.5, "bias_after_scale": False, "bias": 1.0}, expect=_scale),
        Case({"X": i64(3)}, {"scale": 2.0, "bias": -1.0}, expect=_scale),
        Case({"X": f32(2, 3), "ScaleTensor": f32(1), "BiasTensor": i64(1)}, expect=_scale),
        Case({"X": f32(2, 3), "ScaleTensor": f32()}, {"scale": math.inf}, expect=_scale),
        Case({"X": f32(2)}, {"scale": math.inf}, raises="scale: expected a finite number, got inf"),
        Case({"X": f32(2)}, {"bias": math.nan}, raises="bias: expected a finite number, got nan"),
        Case(
            {"X": f32(2), "ScaleTensor": f32(2, 1)},
            raises="ScaleTensor: expected a tensor of 1 element, got dims [2, 1]",
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
    cases=(
        Case({"X": f32(2, 3)}, {"min": -0.5, "max": 0.5}, expect=_clip),
        Case({"X": f32()}, {"min": -_OPEN, "max": 0.5}, expect=_clip),
        Case({"X": i32(4)}, {"min": 1.0, "max": 3.0}, expect=_clip),
        Case(
            {"X": f32(2, 3), "Min": f32(1), "Max": pos32()},
            {"min": 1.0, "max": -1.0},  # ignored: the tensors win
            expect=_clip,
        ),
        Case({"X": f32(2)}, {"min": 1.0, "max": -1.0}, raises="expected min <= max, got min=1.0"),
        Case(
            {"X": f32(2)}, {"min": math.nan, "max": 1.0}, raises="expected numbers for min and max"
        ),
        Case(
            {"X": f32(2), "Max": f32(3)},
            {"min": 0.0, "max": 1.0},
            raises="Max: expected a tensor of 1 element, got dims [3]",
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
    return TensorType(out, x.shape, value)


CAST = OpDef(
    op_type="cast",
    doc="Converts X to out_dtype (a VarType number); in_dtype is informational.",
    inputs=(In("X"),),
    outputs=(Out("Out"),),  # the dtype comes from out_dtype
    types={"T": ALL},
    attrs=CastAttrs,
    ignored_attrs=_ONEDNN | _ONEDNN_DTYPE,
    infer=_cast_infer,
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
        Case(
            {"X": f32(2)},
            {"in_dtype": 5, "out_dtype": 23},
            raises="out_dtype: expected a supported",
        ),
        Case(
            {"X": f32(2)}, {"in_dtype": 99, "out_dtype": 5}, raises="in_dtype: expected a supported"
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
    cost=lambda *_: 0,
    cases=(
        Case({"X": f32(2, 3)}, expect=lambda x, a: x),
        Case({"X": i64()}, expect=lambda x, a: x),
        Case({"X": boolean(4)}, expect=lambda x, a: x),
        Case({}, raises="expected an input X to copy, got an empty slot"),
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
    POW,
    SCALE,
    CLIP,
    CAST,
    ASSIGN,
)
