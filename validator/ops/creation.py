"""Constants and shape tensors: fill_constant, fill_any_like, assign_value, range, shape."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from graph_proto import framework_pb2 as pb
from graph_proto.builder import Attr
from graph_proto.types import ALL, FLOATS, INDICES, INTEGERS, UNKNOWN, DType, Shape, numel
from validator.diagnostics import Code
from validator.ops._batch import ROWWISE, SIZED_BY_VALUES
from validator.ops._cases import boolean, f32, i32, i64
from validator.ops._def import (
    AttrError,
    BatchView,
    Case,
    Couples,
    In,
    NoAttrs,
    OpDef,
    Out,
    Scalar,
    ShapeError,
    TensorType,
)
from validator.ops._shape import MAX_RANK, VALUE_LIMIT, dtype_attr, product

INT32_MAX = 2**31 - 1

# NOTE: results of up to VALUE_LIMIT elements carry their values (TensorType.value), float ones
# included, so that shape arithmetic (shape -> slice -> fill_constant, range bounds) stays exact.


# What std::stod (Paddle's parse of str_value) and Python's float() read alike; anything else
# is refused rather than guessed.
_DECIMAL: Final = re.compile(
    r"[+-]?(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?|[+-]?(?:inf|infinity|nan)", re.IGNORECASE
)
_INTEGER: Final = re.compile(r"[+-]?\d+")
FLOAT64_EXACT: Final = 2**53


def str_value_number(text: str) -> int | float:
    """str_value as Paddle's kernel reads it (std::stod: a double); an integer stays exact, so
    one the double would round is refused, as is anything but a plain decimal number."""
    stripped = text.strip()
    if not _DECIMAL.fullmatch(stripped):
        raise AttrError(f"str_value must be a decimal number, got {text[:32]!r}")
    number = float(stripped)  # NOTE: before int(): a 5000-digit string overflows to inf here
    if math.isinf(number) and "inf" not in stripped.lower():
        raise AttrError(f"str_value must fit a float64, got {stripped[:32]!r}")
    if not _INTEGER.fullmatch(stripped):
        return number
    exact = int(stripped)
    if abs(exact) > FLOAT64_EXACT and number != exact:
        raise AttrError(
            f"str_value must be an integer a float64 holds exactly, got {stripped[:32]!r}"
        )
    return exact


def _cast(number: Scalar, dtype: DType, what: str) -> Scalar:
    """A constant converted to `dtype` as the kernel stores it; out-of-range integers fail."""
    if dtype == DType.BOOL:
        return bool(number)
    if dtype in FLOATS:
        return float(number) if dtype == DType.BF16 else float(np.array(number, dtype.numpy))
    if isinstance(number, float) and not math.isfinite(number):
        raise AttrError(f"{what} must be finite for {dtype.label}, got {number}")
    value = int(number)  # NOTE: C++ casts truncate toward zero, as int() does
    info = np.iinfo(dtype.label)
    if not info.min <= value <= info.max:
        raise AttrError(f"{what} must fit {dtype.label}, got {value}")
    return value


def _filled(dtype: DType, shape: Shape, constant: Scalar | None) -> TensorType:
    """A tensor of one repeated constant; its values are kept when it is small."""
    if constant is None or dtype == DType.BF16 or any(d < 0 for d in shape):
        return TensorType(dtype, shape)
    count = numel(shape)
    return TensorType(dtype, shape, (constant,) * count if count <= VALUE_LIMIT else None)


def _shape_attr(shape: Sequence[int], what: str = "shape") -> Shape:
    if len(shape) > MAX_RANK:
        raise AttrError(f"{what} must have at most {MAX_RANK} dims, got {len(shape)}")
    if any(d < 0 for d in shape):
        raise AttrError(f"{what} must be >= 0, got {list(shape)}")
    return tuple(shape)


def _single(t: TensorType, what: str) -> Scalar | None:
    """The value of a one-element tensor ([1] or 0-D), None when not known."""
    if product(t.shape) != 1:
        raise ShapeError(f"{what}: expected 1 element ([1] or 0-D), got dims {list(t.shape)}")
    return None if t.value is None else t.value[0]


# --- fill_constant ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FillConstantAttrs:
    dtype: int = 5
    shape: tuple[int, ...] = ()
    value: float = 0.0
    str_value: str = ""
    force_cpu: bool = False
    place_type: int = -1  # -1 executor's choice, 0 CPU, 1 GPU, 2 pinned, 3 XPU


def _fill_dim(value: Scalar | None, attr: int) -> int:
    if value is None:
        # NOTE: Paddle's compile-time shape is the attr, which holds -1 for tensor entries.
        return attr if attr >= 0 else UNKNOWN
    if int(value) < 0:
        raise ShapeError(f"shape tensors must hold sizes >= 0, got {value}")
    return int(value)


def _fill_shape(
    shape_tensor: TensorType | None, shape_list: tuple[TensorType, ...] | None, attr: Shape
) -> Shape:
    """The output dims: ShapeTensor's or ShapeTensorList's values (else the attr's), or the attr."""
    if shape_tensor is not None and shape_list is not None:
        raise ShapeError("expected ShapeTensor or ShapeTensorList, got both")
    if shape_list is not None:
        values = [_single(t, "ShapeTensorList") for t in shape_list]
    elif shape_tensor is not None:
        count = product(shape_tensor.shape)
        if shape_tensor.rank > 1 or not 0 <= count <= MAX_RANK:
            raise ShapeError(
                f"ShapeTensor: expected 1-D with at most {MAX_RANK} elements, got dims "
                f"{list(shape_tensor.shape)}"
            )
        known = shape_tensor.value
        values = list(known) if known is not None else [None] * count
    else:
        return _shape_attr(attr)
    if len(values) > MAX_RANK:
        raise ShapeError(f"expected at most {MAX_RANK} shape tensors, got {len(values)}")
    if attr and len(attr) != len(values):
        raise AttrError(
            f"shape: expected {len(values)} entries like the shape tensors, got {len(attr)}"
        )
    attrs = attr or (UNKNOWN,) * len(values)
    return tuple(_fill_dim(v, d) for v, d in zip(values, attrs, strict=True))


def _fill_constant_infer(
    value_tensor: TensorType | None,
    shape_tensor: TensorType | None,
    shape_list: tuple[TensorType, ...] | None,
    a: FillConstantAttrs,
) -> TensorType:
    dtype = dtype_attr(a.dtype)
    if a.place_type not in range(-1, 4):
        raise AttrError(f"place_type must be in [-1, 3], got {a.place_type}")
    if len(a.shape) > MAX_RANK:
        raise AttrError(f"shape must have at most {MAX_RANK} dims, got {len(a.shape)}")
    shape = _fill_shape(shape_tensor, shape_list, a.shape)
    if value_tensor is None:
        number = str_value_number(a.str_value) if a.str_value else a.value
        constant: Scalar | None = _cast(number, dtype, "value")
    else:
        known = _single(value_tensor, "ValueTensor")
        constant = None if known is None else _cast(known, dtype, "ValueTensor")
    return _filled(dtype, shape, constant)


def _fill_constant_ref(
    value: np.ndarray | None,
    shape: np.ndarray | None,
    shape_list: tuple[np.ndarray, ...] | None,
    a: FillConstantAttrs,
) -> np.ndarray:
    dims = a.shape
    if shape is not None:
        dims = tuple(shape.tolist())
    elif shape_list is not None:
        dims = tuple(int(t.reshape(-1)[0]) for t in shape_list)
    fill = value.reshape(-1)[0] if value is not None else a.str_value or a.value
    dtype = dtype_attr(a.dtype).numpy
    return np.full(dims, float(fill) if dtype.kind == "f" else int(float(fill)), dtype)


FILL_CONSTANT = OpDef(
    op_type="fill_constant",
    doc="A tensor of `shape` (or ShapeTensor / ShapeTensorList) filled with str_value, value "
    "or ValueTensor, of dtype `dtype`.",
    inputs=(
        In("ValueTensor", None, optional=True),
        In("ShapeTensor", "S", optional=True),
        In("ShapeTensorList", "S", variadic=True, optional=True),
    ),
    outputs=(Out("Out"),),
    types={"T": ALL, "S": INDICES},
    attrs=FillConstantAttrs,
    infer=_fill_constant_infer,
    batch=SIZED_BY_VALUES,
    cases=(
        Case({}, {"shape": [2, 3], "dtype": 5, "value": 1.5}, expect=_fill_constant_ref),
        Case(
            {},
            {"shape": [3], "dtype": 3, "str_value": "7", "value": 7.0},
            expect=_fill_constant_ref,
        ),
        Case(
            {},
            {"shape": [], "dtype": 0, "str_value": "1.0", "force_cpu": True},
            expect=_fill_constant_ref,
        ),
        Case({"ShapeTensor": np.array([2, 4], np.int32)}, {"dtype": 6}, expect=_fill_constant_ref),
        Case(
            {"ShapeTensorList": (np.array([2], np.int64), np.array(3, np.int64))},
            {"shape": [-1, -1], "dtype": 5},
            expect=_fill_constant_ref,
        ),
        Case({"ValueTensor": f32(1)}, {"shape": [2], "dtype": 5}, expect=_fill_constant_ref),
        # NOTE: str_value keeps integers float32 cannot hold (Paddle parses it as a double).
        Case(
            {},
            {"shape": [2], "dtype": 3, "str_value": "1099511627777", "value": 1.1e12},
            expect=_fill_constant_ref,
        ),
        Case({}, {"shape": [1], "dtype": 2, "str_value": "16777217"}, expect=_fill_constant_ref),
        Case(
            {},
            {"shape": [2], "dtype": 3, "str_value": "-2.7"},
            expect=lambda *_: np.full(2, -2, np.int64),
        ),
        Case({}, {"shape": [2, 1], "dtype": 5, "str_value": "-inf"}, expect=_fill_constant_ref),
        Case(
            {},
            {"shape": [3], "dtype": 4, "value": 0.1},
            expect=lambda *_: np.full(3, 0.1, np.float16),
        ),
        Case({}, {"shape": [2], "dtype": 0, "value": 0.5}, expect=lambda *_: np.full(2, True)),
        Case({}, {"shape": [0, 3], "dtype": 2, "value": 4.0}, expect=_fill_constant_ref),
        Case(
            {"ShapeTensor": np.array([3, 0], np.int64)},
            {"dtype": 3, "str_value": "5"},
            expect=_fill_constant_ref,
        ),
        Case(
            {
                "ValueTensor": np.array([-2.7], np.float32),
                "ShapeTensor": np.array([2, 2], np.int32),
            },
            {"dtype": 3},
            expect=lambda *_: np.full((2, 2), -2, np.int64),
        ),
        Case(
            {"ValueTensor": np.array(7, np.int64), "ShapeTensorList": (np.array([2], np.int32),)},
            {"shape": [-1], "dtype": 4},
            expect=lambda *_: np.full(2, 7, np.float16),
        ),
        Case(
            {"ValueTensor": f32(1)},
            {"shape": [], "dtype": 0},
            expect=lambda v, *_: np.asarray(v[0] != 0),
        ),
        Case(
            {}, {"shape": [-1, 3]}, raises="shape must be >= 0, got [-1, 3]", code=Code.ATTR_VALUE
        ),
        Case(
            {},
            {"shape": [2], "dtype": 3, "str_value": "inf"},
            raises="value must be finite",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {},
            {"shape": [2], "dtype": 2, "value": 3e9},
            raises="value must fit int32",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {},
            {"shape": [2], "str_value": "abc"},
            raises="str_value must be a decimal number, got 'abc'",
            code=Code.ATTR_VALUE,
        ),
        Case(  # Python's int() reads "1_000"; std::stod stops at the "_": refused, not guessed
            {},
            {"shape": [2], "dtype": 3, "str_value": "1_000"},
            raises="str_value must be a decimal number, got '1_000'",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {},
            {"shape": [2], "dtype": 6, "str_value": "1e999"},
            raises="str_value must fit a float64, got '1e999'",
            code=Code.ATTR_VALUE,
        ),
        Case(  # 2**53 + 1: the rule would keep it exact, Paddle's double rounds it
            {},
            {"shape": [2], "dtype": 3, "str_value": "9007199254740993"},
            raises="str_value must be an integer a float64 holds exactly",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {},
            {"shape": [2], "dtype": 17},
            raises="dtype must be a supported VarType",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {},
            {"shape": [2], "place_type": 7},
            raises="place_type must be in [-1, 3], got 7",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {},
            {"shape": [1] * 10},
            raises="shape must have at most 9 dims, got 10",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {"ShapeTensor": np.array([2, -1], np.int32)},
            raises="sizes >= 0, got -1",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"ValueTensor": f32(2)},
            {"shape": [2]},
            raises="ValueTensor: expected 1 element",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {"ShapeTensor": f32(2)},
            raises="input 'ShapeTensor': expected one of",
            code=Code.DTYPE_MISMATCH,
        ),
    ),
)


# --- fill_any_like ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FillAnyLikeAttrs:
    value: float = 0.0
    dtype: int = -1  # -1: X's dtype


def _fill_any_like_infer(x: TensorType, a: FillAnyLikeAttrs) -> TensorType:
    dtype = x.dtype if a.dtype == -1 else dtype_attr(a.dtype)
    return _filled(dtype, x.shape, _cast(a.value, dtype, "value"))


def _fill_any_like_ref(x: np.ndarray, a: FillAnyLikeAttrs) -> np.ndarray:
    dtype = x.dtype if a.dtype == -1 else dtype_attr(a.dtype).numpy
    return np.full(x.shape, a.value).astype(dtype)


FILL_ANY_LIKE = OpDef(
    op_type="fill_any_like",
    doc="A tensor shaped like X filled with `value`, of dtype `dtype` (-1: X's dtype).",
    inputs=(In("X"),),
    outputs=(Out("Out"),),
    types={"T": ALL},
    attrs=FillAnyLikeAttrs,
    infer=_fill_any_like_infer,
    batch=ROWWISE,
    cases=(
        Case({"X": f32(2, 3)}, {"value": 1.0}, expect=_fill_any_like_ref),
        Case({"X": f32(2, 3)}, {"value": 2.0, "dtype": 3}, expect=_fill_any_like_ref),
        Case({"X": i32()}, {"value": 0.0, "dtype": 0}, expect=_fill_any_like_ref),
        Case({"X": f32(2, 0)}, {"value": 3.0}, expect=_fill_any_like_ref),
        Case({"X": boolean(3)}, {"value": 0.5}, expect=lambda x, a: np.full(3, True)),
        Case({"X": i64(2, 2)}, {"value": -2.7}, expect=lambda x, a: np.full((2, 2), -2, np.int64)),
        Case({"X": f32(2)}, {"value": 0.1, "dtype": 4}, expect=_fill_any_like_ref),
        Case(
            {"X": f32(2)},
            {"value": 0.1, "dtype": 6},
            expect=lambda x, a: np.full(2, np.float32(0.1), np.float64),
        ),
        Case(
            {"X": f32(2)},
            {"value": math.nan, "dtype": 2},
            raises="value must be finite",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {"X": f32(2)},
            {"dtype": 99},
            raises="dtype must be a supported VarType number, got 99",
            code=Code.ATTR_VALUE,
        ),
    ),
)


# --- assign_value -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AssignValueAttrs:
    shape: tuple[int, ...]
    dtype: int = 5
    # Paddle 3.x (assign_value v1) writes `values`; legacy_format and 2.x programs write one of
    # the typed lists (int32 arrays land in int64_values, float64 ones in fp32_values).
    values: tuple[int | float | bool, ...] = ()
    bool_values: tuple[int, ...] = ()
    fp32_values: tuple[float, ...] = ()
    int32_values: tuple[int, ...] = ()
    int64_values: tuple[int, ...] = ()


def _legacy_lists(a: AssignValueAttrs, dtype: DType) -> Sequence[Scalar]:
    """The one non-empty legacy list, checked against dtype's kind."""
    allowed = (
        {"bool_values"}
        if dtype == DType.BOOL
        else {"fp32_values"}
        if dtype in FLOATS
        else {"int32_values", "int64_values"}
    )
    lists = {
        "bool_values": a.bool_values,
        "fp32_values": a.fp32_values,
        "int32_values": a.int32_values,
        "int64_values": a.int64_values,
    }
    given = [name for name, values in lists.items() if values]
    if any(name not in allowed for name in given) or len(given) > 1:
        raise AttrError(
            f"expected values in one of {sorted(allowed)} for {dtype.label}, got {given}"
        )
    return lists[given[0]] if given else ()


def _check_constants(values: Sequence[Scalar], dtype: DType) -> None:
    """Integer and bool dtypes take integral values in range (bool: 0 or 1)."""
    if dtype in FLOATS:
        return
    if not all(isinstance(v, int) for v in values):
        raise AttrError(f"values must be integers for {dtype.label}")
    if values:
        low, high = (
            (0, 1)
            if dtype == DType.BOOL
            else (np.iinfo(dtype.label).min, np.iinfo(dtype.label).max)
        )
        if not (low <= min(values) and max(values) <= high):
            raise AttrError(f"values must be in [{low}, {high}] for {dtype.label}")


def _assign_value_infer(a: AssignValueAttrs) -> TensorType:
    dtype = dtype_attr(a.dtype)
    shape = _shape_attr(a.shape)
    legacy = _legacy_lists(a, dtype)
    if a.values and legacy:
        raise AttrError("expected `values` or a legacy *_values list, got both")
    values = a.values or legacy
    if len(values) != numel(shape):
        raise AttrError(
            f"values: expected {numel(shape)} elements for shape {list(shape)}, got {len(values)}"
        )
    _check_constants(values, dtype)
    small = len(values) <= VALUE_LIMIT and dtype != DType.BF16
    kept = tuple(_cast(v, dtype, "values") for v in values) if small else None
    return TensorType(dtype, shape, kept)


def _assign_value_ref(a: AssignValueAttrs) -> np.ndarray:
    values = a.values or a.bool_values or a.fp32_values or a.int32_values or a.int64_values
    return np.array(values, dtype_attr(a.dtype).numpy).reshape(a.shape)


ASSIGN_VALUE = OpDef(
    op_type="assign_value",
    doc="A constant tensor of `shape` and `dtype` whose elements are given in `values` "
    "(Paddle 3.x) or in bool_values / fp32_values / int32_values / int64_values (legacy).",
    inputs=(),
    outputs=(Out("Out"),),
    types={"T": ALL},
    attrs=AssignValueAttrs,
    infer=_assign_value_infer,
    batch=SIZED_BY_VALUES,
    cases=(
        Case(
            {},
            {"shape": [2, 2], "dtype": 5, "values": Attr(pb.SCALARS, [1.0, 2.0, 3.0, 4.0])},
            expect=_assign_value_ref,
        ),
        Case(
            {},
            {"shape": [3], "dtype": 3, "values": Attr(pb.SCALARS, [1, 2, 3])},
            expect=_assign_value_ref,
        ),
        Case(
            {},
            {"shape": [2], "dtype": 0, "values": Attr(pb.SCALARS, [True, False])},
            expect=_assign_value_ref,
        ),
        Case({}, {"shape": [2, 3], "dtype": 5, "fp32_values": [0.5] * 6}, expect=_assign_value_ref),
        Case(
            {}, {"shape": [2], "dtype": 2, "int64_values": [2**31 - 1, 0]}, expect=_assign_value_ref
        ),
        Case({}, {"shape": [], "dtype": 6, "fp32_values": [1.5]}, expect=_assign_value_ref),
        Case(
            {},
            {"shape": [0], "dtype": 5, "fp32_values": Attr(pb.FLOATS, [])},
            expect=_assign_value_ref,
        ),
        Case({}, {"shape": [2], "dtype": 0, "bool_values": [1, 0]}, expect=_assign_value_ref),
        Case(
            {},
            {"shape": [3], "dtype": 4, "values": Attr(pb.SCALARS, [0.1, -2.5, 65504.0])},
            expect=_assign_value_ref,
        ),
        Case(
            {},
            {"shape": [2], "dtype": 6, "values": Attr(pb.SCALARS, [0.1, 1e300])},
            expect=_assign_value_ref,
        ),
        Case(
            {},
            {"shape": [1, 2], "dtype": 21, "int32_values": [-128, 127]},
            expect=_assign_value_ref,
        ),
        Case(
            {},
            {"shape": [2], "dtype": 3, "int64_values": [2**53 + 1, -(2**62)]},
            expect=_assign_value_ref,
        ),
        Case(
            {},
            {"shape": [2, 3], "fp32_values": [1.0] * 5},
            raises="values: expected 6 elements for shape [2, 3], got 5",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {},
            {"shape": [2], "values": Attr(pb.SCALARS, [1.0])},
            raises="expected 2 elements",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {},
            {"shape": [1], "dtype": 3, "fp32_values": [1.0]},
            raises="expected values in one of",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {},
            {"shape": [1], "dtype": 2, "int32_values": [1], "int64_values": [1]},
            raises="got ['int32_values', 'int64_values']",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {},
            {"shape": [1], "dtype": 2, "int64_values": [2**40]},
            raises="values must be in [",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {},
            {"shape": [1], "dtype": 3, "values": Attr(pb.SCALARS, [1.5])},
            raises="values must be integers for int64",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {},
            {"shape": [1], "values": Attr(pb.SCALARS, [1.0]), "fp32_values": [1.0]},
            raises="got both",
            code=Code.ATTR_VALUE,
        ),
        Case(
            {},
            {"shape": [-1], "fp32_values": [1.0]},
            raises="shape must be >= 0, got [-1]",
            code=Code.ATTR_VALUE,
        ),
    ),
)


# --- range --------------------------------------------------------------------------------------


def _range_length(start: Scalar, end: Scalar, step: Scalar, dtype: DType) -> int:
    """Paddle's GetSize: ceil(|end - start| / |step|), computed in the tensors' dtype."""
    if not all(math.isfinite(v) for v in (start, end, step)):
        raise ShapeError(f"Start, End and Step must be finite, got {start}, {end}, {step}")
    if (start < end and step < 0) or (start > end and step > 0):
        raise ShapeError(f"Step must move from Start towards End, got {start}, {end}, {step}")
    if dtype in INTEGERS:
        s, e, st = int(start), int(end), int(step)
        return (abs(e - s) + abs(st) - 1) // abs(st)
    kind = np.float64 if dtype == DType.BF16 else dtype.numpy
    s_, e_, st_ = (np.asarray(v, kind) for v in (start, end, step))
    with np.errstate(all="ignore"):
        length = np.ceil(np.abs((e_ - s_) / st_))
    if not np.isfinite(length):
        raise ShapeError(f"(End - Start) / Step must be finite, got {start}, {end}, {step}")
    return int(length)


def _range_infer(start: TensorType, end: TensorType, step: TensorType, _a: NoAttrs) -> TensorType:
    s, e, st = _single(start, "Start"), _single(end, "End"), _single(step, "Step")
    if st is not None and st == 0:
        raise ShapeError("Step must not be 0, got 0")
    if s is None or e is None or st is None:
        return TensorType(start.dtype, (UNKNOWN,))
    length = _range_length(s, e, st, start.dtype)
    value = None
    if start.dtype in INTEGERS and length <= VALUE_LIMIT:
        value = tuple(range(int(s), int(e), int(st)))
    return TensorType(start.dtype, (length,), value)


def _range_ref(start: np.ndarray, end: np.ndarray, step: np.ndarray, _a: NoAttrs) -> np.ndarray:
    first, last, by = (v.reshape(-1)[0] for v in (start, end, step))
    return np.arange(first, last, by, dtype=start.dtype)


def _bounds(
    start: float, end: float, step: float, dtype: type = np.int64, shape: Shape = (1,)
) -> dict[str, np.ndarray]:
    values = {"Start": start, "End": end, "Step": step}
    return {k: np.full(shape, v, dtype) for k, v in values.items()}


RANGE = OpDef(
    op_type="range",
    doc="The values Start, Start + Step, ... short of End (one-element tensors); the length "
    "is known only when all three values are.",
    inputs=(In("Start"), In("End"), In("Step")),
    outputs=(Out("Out"),),
    types={"T": FLOATS | INDICES},
    infer=_range_infer,
    batch=SIZED_BY_VALUES,
    cases=(
        Case(_bounds(0, 10, 3), expect=_range_ref),
        Case(_bounds(5, -1, -2, np.int32, ()), expect=_range_ref),
        Case(_bounds(2, 2, 1), expect=_range_ref),
        Case(_bounds(-7, 8, 4, np.int64), expect=_range_ref),
        Case(_bounds(0, 4, 0), raises="Step must not be 0, got 0", code=Code.SHAPE_MISMATCH),
        Case(
            _bounds(0, 5, -1),
            raises="Step must move from Start towards End, got 0, 5, -1",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {**_bounds(0, 1, 1), "Start": i64(2)},
            raises="Start: expected 1 element",
            code=Code.SHAPE_MISMATCH,
        ),
        Case(
            {**_bounds(0, 1, 1), "End": i32(1)},
            raises="expected int64 like the other T inputs",
            code=Code.DTYPE_MISMATCH,
        ),
    ),
)


# --- shape --------------------------------------------------------------------------------------


def _shape_infer(x: TensorType, _a: NoAttrs) -> TensorType:
    if any(d > INT32_MAX for d in x.shape):
        raise ShapeError(f"Input: expected dims that fit the int32 result, got {list(x.shape)}")
    if x.rank > VALUE_LIMIT:
        return TensorType(DType.INT32, (x.rank,))
    if x.known:
        return TensorType(DType.INT32, (x.rank,), x.shape)
    return TensorType(DType.INT32, (x.rank,), partial=tuple(d if d >= 0 else None for d in x.shape))


def _shape_batch(_view: BatchView) -> int:
    raise Couples("reads the batch size: its value depends on how many rows run together")


SHAPE = OpDef(
    op_type="shape",
    doc="The dims of Input as an int32 vector (its values are known when every dim is).",
    inputs=(In("Input", None),),
    outputs=(Out("Out", DType.INT32),),
    types={},
    ignored_attrs=frozenset({"use_mkldnn", "mkldnn_data_type"}),
    infer=_shape_infer,
    batch=_shape_batch,
    cost=lambda *_: 0,
    cases=(
        Case({"Input": f32(2, 3, 4)}, expect=lambda x, a: np.array(x.shape, np.int32)),
        Case({"Input": f32()}, expect=lambda x, a: np.array(x.shape, np.int32)),
        Case({"Input": i64(5)}, expect=lambda x, a: np.array(x.shape, np.int32)),
        Case({"Input": boolean(0, 3)}, expect=lambda x, a: np.array(x.shape, np.int32)),
        Case(
            {"Input": np.zeros((2**31, 0), np.float32)},
            raises="fit the int32 result",
            code=Code.SHAPE_MISMATCH,
        ),
    ),
)

OPS = (FILL_CONSTANT, FILL_ANY_LIKE, ASSIGN_VALUE, RANGE, SHAPE)
