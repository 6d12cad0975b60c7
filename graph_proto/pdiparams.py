"""Reads and writes .pdiparams (Paddle's save_combine format) with every length checked.

Layout per tensor, little-endian, no file header: u32 version (0), u64 lod_level, lod_level LoD
tables, u32 tensor version (0), i32 desc_len, desc_len bytes of VarType.TensorDesc, raw data.
The reader never copies tensor data: it returns offsets, and `array()` makes a numpy view.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

import numpy as np
from google.protobuf import message as _message

from graph_proto import framework_pb2 as pb
from graph_proto.errors import FormatError
from graph_proto.types import VARTYPE_ITEMSIZE, DType, dtype_from_vartype

MAX_DESC_BYTES: Final = 4096  # a TensorDesc of rank 64 with huge dims is under 1 KiB
MAX_RANK: Final = 64
INT64_MAX: Final = 2**63 - 1
_U32: Final = struct.Struct("<I")
_U64: Final = struct.Struct("<Q")
_I32: Final = struct.Struct("<i")


@dataclass(frozen=True, slots=True)
class ParamTensor:
    """Where one tensor's data lies in the file; dtype is None for types graphgate cannot run."""

    vartype: int
    dtype: DType | None
    dims: tuple[int, ...]
    offset: int
    nbytes: int


class _Cursor:
    """Reads fixed-size fields from a buffer, refusing to run past its end."""

    def __init__(self, data: memoryview, index: int) -> None:
        self.data = data
        self.pos = 0
        self.index = index

    def left(self) -> int:
        return len(self.data) - self.pos

    def take(self, size: int, what: str) -> memoryview:
        if size > self.left():
            raise FormatError(
                "PARAMS_TRUNCATED",
                f"tensor {self.index}: expected {size} bytes of {what}, got {self.left()}",
                index=self.index,
            )
        chunk = self.data[self.pos : self.pos + size]
        self.pos += size
        return chunk

    def unpack(self, fmt: struct.Struct, what: str) -> int:
        value: int = fmt.unpack(self.take(fmt.size, what))[0]
        return value


def read_params(data: bytes | memoryview, count: int | None = None) -> list[ParamTensor]:
    """Parses `count` tensors (all of them when None) and requires the file to end exactly there."""
    cursor = _Cursor(memoryview(data), 0)
    tensors: list[ParamTensor] = []
    while (count is None and cursor.left() > 0) or (count is not None and len(tensors) < count):
        if count is not None and cursor.left() == 0:
            raise FormatError(
                "PARAMS_COUNT",
                f"expected {count} tensors (one per persistable var), got {len(tensors)}",
                index=len(tensors),
            )
        cursor.index = len(tensors)
        tensors.append(_read_tensor(cursor))
    if cursor.left():
        raise FormatError(
            "PARAMS_TRAILING",
            f"expected the file to end after tensor {len(tensors) - 1}, "
            f"got {cursor.left()} more bytes",
            index=len(tensors),
        )
    return tensors


def _read_tensor(cursor: _Cursor) -> ParamTensor:
    index = cursor.index
    _expect_zero(cursor.unpack(_U32, "the DenseTensor version"), "DenseTensor version", index)
    lod_level = cursor.unpack(_U64, "the LoD level")
    if lod_level != 0:
        raise FormatError(
            "PARAMS_HEADER", f"tensor {index}: expected LoD level 0, got {lod_level}", index=index
        )
    _expect_zero(cursor.unpack(_U32, "the tensor version"), "tensor version", index)
    desc_len = cursor.unpack(_I32, "the description length")
    if not 0 < desc_len <= MAX_DESC_BYTES:
        raise FormatError(
            "PARAMS_HEADER",
            f"tensor {index}: expected a description length in 1..{MAX_DESC_BYTES}, got {desc_len}",
            index=index,
        )
    vartype, dims = _parse_desc(bytes(cursor.take(desc_len, "the tensor description")), index)
    itemsize = VARTYPE_ITEMSIZE.get(vartype)
    if itemsize is None:
        raise FormatError(
            "PARAMS_DTYPE",
            f"tensor {index}: expected an element type, got VarType {vartype}",
            index=index,
        )
    nbytes = _checked_nbytes(dims, itemsize, index)
    offset = cursor.pos
    cursor.take(nbytes, f"data for dims {list(dims)}")
    return ParamTensor(vartype, dtype_from_vartype(vartype), dims, offset, nbytes)


def _expect_zero(value: int, what: str, index: int) -> None:
    if value != 0:
        raise FormatError(
            "PARAMS_HEADER", f"tensor {index}: expected {what} 0, got {value}", index=index
        )


def _parse_desc(raw: bytes, index: int) -> tuple[int, tuple[int, ...]]:
    desc = pb.VarType.TensorDesc()
    try:
        desc.ParseFromString(raw)
    except _message.DecodeError:
        raise FormatError(
            "PARAMS_HEADER",
            f"tensor {index}: expected a TensorDesc protobuf, got undecodable bytes",
            index=index,
        ) from None
    # ByteSize() raises on a message missing a required field, so check that first.
    initialized = desc.IsInitialized()
    size = desc.ByteSize() if initialized else 0
    desc.DiscardUnknownFields()
    if not initialized or desc.ByteSize() != size:
        raise FormatError(
            "PARAMS_HEADER",
            f"tensor {index}: expected a TensorDesc with data_type and dims only, got "
            + ("no known data_type" if not initialized else "unknown fields or enum values"),
            index=index,
        )
    if len(desc.dims) > MAX_RANK:
        raise FormatError(
            "PARAMS_DIMS",
            f"tensor {index}: expected rank <= {MAX_RANK}, got {len(desc.dims)}",
            index=index,
        )
    return int(desc.data_type), tuple(desc.dims)


def _checked_nbytes(dims: tuple[int, ...], itemsize: int, index: int) -> int:
    count = 1
    for dim in dims:
        if dim < 0:
            raise FormatError(
                "PARAMS_DIMS", f"tensor {index}: expected dims >= 0, got {list(dims)}", index=index
            )
        count *= dim
        if count * itemsize > INT64_MAX:
            raise FormatError(
                "PARAMS_DIMS",
                f"tensor {index}: expected a byte size below 2**63, got dims {list(dims)}",
                index=index,
            )
    return count * itemsize


def array(data: bytes | memoryview, tensor: ParamTensor) -> np.ndarray:
    """A read-only numpy view of one tensor's data (no copy)."""
    if tensor.dtype is None:
        raise ValueError(f"VarType {tensor.vartype} has no numpy dtype in graphgate")
    view = np.frombuffer(
        data,
        dtype=tensor.dtype.numpy,
        count=tensor.nbytes // tensor.dtype.itemsize,
        offset=tensor.offset,
    )
    view.flags.writeable = False
    return view.reshape(tensor.dims)


def write_params(tensors: Iterable[tuple[DType, np.ndarray]]) -> bytes:
    """Serializes tensors in the given order (Paddle expects them sorted by variable name)."""
    out = bytearray()
    for dtype, value in tensors:
        desc = pb.VarType.TensorDesc(dims=list(value.shape))
        desc.data_type = pb.VarType.Type.ValueType(int(dtype))
        raw = desc.SerializeToString()
        out += _U32.pack(0) + _U64.pack(0) + _U32.pack(0) + _I32.pack(len(raw)) + raw
        out += np.ascontiguousarray(value, dtype=dtype.numpy).tobytes()
    return bytes(out)
