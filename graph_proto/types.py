"""Tensor element types (numbered as Paddle's VarType.Type) and shapes."""

from __future__ import annotations

import enum
from typing import Final

import numpy as np


class DType(enum.IntEnum):
    """The dense-tensor element types graphgate understands; values equal VarType.Type numbers."""

    BOOL = 0
    INT16 = 1
    INT32 = 2
    INT64 = 3
    FP16 = 4
    FP32 = 5
    FP64 = 6
    UINT8 = 20
    INT8 = 21
    BF16 = 22

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self]

    @property
    def numpy(self) -> np.dtype[np.generic]:
        """The numpy dtype; BF16 has none and maps to uint16 storage."""
        return _NUMPY_DTYPES[self]  # made once: every request's feed and output checks ask

    @property
    def label(self) -> str:
        """Lower-case name as users write it (`float32`, `int64`)."""
        return _LABEL[self]


_ITEMSIZE: Final = {
    DType.BOOL: 1,
    DType.INT16: 2,
    DType.INT32: 4,
    DType.INT64: 8,
    DType.FP16: 2,
    DType.FP32: 4,
    DType.FP64: 8,
    DType.UINT8: 1,
    DType.INT8: 1,
    DType.BF16: 2,
}
_NUMPY: Final = {
    DType.BOOL: "bool",
    DType.INT16: "<i2",
    DType.INT32: "<i4",
    DType.INT64: "<i8",
    DType.FP16: "<f2",
    DType.FP32: "<f4",
    DType.FP64: "<f8",
    DType.UINT8: "u1",
    DType.INT8: "i1",
    DType.BF16: "<u2",
}
_NUMPY_DTYPES: Final = {dtype: np.dtype(name) for dtype, name in _NUMPY.items()}
_LABEL: Final = {
    DType.BOOL: "bool",
    DType.INT16: "int16",
    DType.INT32: "int32",
    DType.INT64: "int64",
    DType.FP16: "float16",
    DType.FP32: "float32",
    DType.FP64: "float64",
    DType.UINT8: "uint8",
    DType.INT8: "int8",
    DType.BF16: "bfloat16",
}

FLOATS: Final = frozenset({DType.FP16, DType.FP32, DType.FP64, DType.BF16})
INTEGERS: Final = frozenset({DType.INT8, DType.UINT8, DType.INT16, DType.INT32, DType.INT64})
INDICES: Final = frozenset({DType.INT32, DType.INT64})
NUMERIC: Final = FLOATS | INTEGERS
ALL: Final = NUMERIC | {DType.BOOL}

# A dimension is a non-negative size, or UNKNOWN (-1, as Paddle writes a dynamic dimension).
Shape = tuple[int, ...]
UNKNOWN: Final = -1

# Byte sizes of every VarType.Type that can hold elements, including ones graphgate rejects
# (needed to skip over or measure them in a .pdiparams file).
VARTYPE_ITEMSIZE: Final = {
    **{int(d): d.itemsize for d in DType},
    19: 8,  # SIZE_T
    23: 8,  # COMPLEX64
    24: 16,  # COMPLEX128
    32: 1,  # FP8_E4M3FN
    33: 1,  # FP8_E5M2
    36: 2,  # UINT16
    37: 4,  # UINT32
    38: 8,  # UINT64
}


def dtype_from_vartype(value: int) -> DType | None:
    """The DType for a VarType.Type number, or None when graphgate does not support it."""
    try:
        return DType(value)
    except ValueError:
        return None


def numel(shape: Shape) -> int:
    """Element count of a fully known shape (1 for a 0-D tensor)."""
    count = 1
    for dim in shape:
        count *= dim
    return count


def show(shape: Shape) -> str:
    """A shape as users read it: `[-1, 3, 224, 224]`."""
    return str(list(shape))
