""".pdiparams reader and writer: Paddle's byte layout, every dtype, 0-D tensors, exact end of file."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from graph_proto import framework_pb2 as pb
from graph_proto.errors import FormatError
from graph_proto.pdiparams import MAX_DESC_BYTES, ParamTensor, array, read_params, write_params
from graph_proto.types import DType

SHAPES = [(), (0,), (1,), (3,), (2, 3), (2, 0, 4), (1, 2, 3, 4)]


def values(dtype: DType, shape: tuple[int, ...]) -> np.ndarray:
    count = int(np.prod(shape, dtype=np.int64))
    raw = np.arange(count, dtype=np.int64) % 7 - 3
    if dtype == DType.BOOL:
        return (raw > 0).reshape(shape)
    if dtype in {DType.UINT8, DType.BF16}:
        raw = np.abs(raw)
    return raw.astype(dtype.numpy).reshape(shape)


def failure(data: bytes, count: int | None = None) -> FormatError:
    with pytest.raises(FormatError) as info:
        read_params(data, count)
    return info.value


@pytest.mark.parametrize("dtype", list(DType), ids=lambda d: d.label)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_round_trip_of_every_dtype_and_shape(dtype: DType, shape: tuple[int, ...]) -> None:
    value = values(dtype, shape)
    data = write_params([(dtype, value)])
    (tensor,) = read_params(data)
    assert (tensor.dtype, tensor.vartype, tensor.dims) == (dtype, int(dtype), shape)
    assert tensor.nbytes == value.size * dtype.itemsize
    assert tensor.offset + tensor.nbytes == len(data)  # the file ends exactly there
    got = array(data, tensor)
    assert got.shape == shape and got.dtype == dtype.numpy
    np.testing.assert_array_equal(got, value)


def test_several_tensors_in_order_to_exact_eof() -> None:
    items = [(DType.FP32, values(DType.FP32, (2, 3))), (DType.INT64, values(DType.INT64, ())),
             (DType.BOOL, values(DType.BOOL, (5,)))]  # fmt: skip
    data = write_params(items)
    tensors = read_params(data, count=3)
    assert [t.dims for t in tensors] == [(2, 3), (), (5,)]
    assert tensors[-1].offset + tensors[-1].nbytes == len(data)
    for (dtype, value), tensor in zip(items, tensors, strict=True):
        assert tensor.dtype == dtype
        np.testing.assert_array_equal(array(data, tensor), value)


def test_the_layout_is_paddles() -> None:
    # paddle-format.md 2: u32 0 | u64 lod 0 | u32 0 | i32 desc_len | TensorDesc | raw data
    data = write_params([(DType.FP32, np.arange(64, dtype=np.float32))])
    assert data[:24] == bytes(4) + bytes(8) + bytes(4) + b"\x04\x00\x00\x00" + b"\x08\x05\x10\x40"
    assert data[24:] == np.arange(64, dtype="<f4").tobytes()
    desc = write_params([(DType.FP32, np.zeros((64, 3, 7, 7), np.float32))])[20:30]
    assert desc == bytes.fromhex("08051040100310071007")


def test_a_0_d_tensor_has_no_dims_and_one_element() -> None:
    data = write_params([(DType.FP64, np.array(2.5))])
    assert data[16:20] == b"\x02\x00\x00\x00" and data[20:22] == b"\x08\x06"  # no dims at all
    (tensor,) = read_params(data)
    assert (tensor.dims, tensor.nbytes) == ((), 8)
    assert array(data, tensor)[()] == 2.5


def test_array_is_a_read_only_view_without_copy() -> None:
    data = write_params([(DType.INT32, values(DType.INT32, (4,)))])
    (tensor,) = read_params(data)
    view = array(data, tensor)
    assert not view.flags.writeable and not view.flags.owndata
    assert np.shares_memory(view, np.frombuffer(data, np.uint8))


def test_types_graphgate_cannot_run_are_measured_not_converted() -> None:
    desc = pb.VarType.TensorDesc(data_type=pb.VarType.COMPLEX64, dims=[2]).SerializeToString()
    data = struct.pack("<IQIi", 0, 0, 0, len(desc)) + desc + bytes(16)
    (tensor,) = read_params(data)
    assert tensor == ParamTensor(pb.VarType.COMPLEX64, None, (2,), 24, 16)
    with pytest.raises(ValueError, match="VarType 23 has no numpy dtype"):
        array(data, tensor)


def test_empty_file_holds_no_tensors() -> None:
    assert read_params(b"") == []
    assert write_params([]) == b""


def test_count_is_enforced_both_ways() -> None:
    one = write_params([(DType.FP32, np.zeros(2, np.float32))])
    e = failure(one, count=2)
    assert (e.code, e.index) == ("PARAMS_COUNT", 1)
    assert e.message == "expected 2 tensors (one per persistable var), got 1"
    e = failure(one + one, count=1)
    assert (e.code, e.index) == ("PARAMS_TRAILING", 1)
    assert e.message == "expected the file to end after tensor 0, got 32 more bytes"


def test_every_truncation_is_a_format_error() -> None:
    data = write_params(
        [(DType.FP32, np.ones((2, 2), np.float32)), (DType.INT8, np.ones(3, np.int8))]
    )
    for size in range(1, len(data)):
        e = failure(data[:size], count=2)
        assert e.code in {"PARAMS_TRUNCATED", "PARAMS_COUNT"}, (size, e.code)
    e = failure(data[:30])
    assert e.message == "tensor 0: expected 16 bytes of data for dims [2, 2], got 4"


@pytest.mark.parametrize(
    ("offset", "fmt", "value", "message"),
    [
        (0, "<I", 1, "tensor 0: expected DenseTensor version 0, got 1"),
        (4, "<Q", 1, "tensor 0: expected LoD level 0, got 1"),
        (4, "<Q", 2**64 - 1, f"tensor 0: expected LoD level 0, got {2**64 - 1}"),
        (12, "<I", 7, "tensor 0: expected tensor version 0, got 7"),
        (16, "<i", -1, f"tensor 0: expected a description length in 1..{MAX_DESC_BYTES}, got -1"),
        (16, "<i", 0, f"tensor 0: expected a description length in 1..{MAX_DESC_BYTES}, got 0"),
        (
            16,
            "<i",
            2**31 - 1,
            f"tensor 0: expected a description length in 1..{MAX_DESC_BYTES}, got {2**31 - 1}",
        ),
    ],
)
def test_header_fields_are_checked(offset: int, fmt: str, value: int, message: str) -> None:
    data = bytearray(write_params([(DType.FP32, np.zeros(3, np.float32))]))
    data[offset : offset + struct.calcsize(fmt)] = struct.pack(fmt, value)
    e = failure(bytes(data))
    assert (e.code, e.message, e.index) == ("PARAMS_HEADER", message, 0)


def with_desc(desc: bytes, data: bytes = b"") -> bytes:
    return struct.pack("<IQIi", 0, 0, 0, len(desc)) + desc + data


@pytest.mark.parametrize(
    ("desc", "code", "message"),
    [
        (b"\xff\xff", "PARAMS_HEADER", "tensor 0: expected a TensorDesc protobuf, got undecodable bytes"),
        (b"\x10\x02", "PARAMS_HEADER", "tensor 0: expected a TensorDesc with data_type and dims only, got no known data_type"),
        (b"\x08\x05\x18\x01", "PARAMS_HEADER", "tensor 0: expected a TensorDesc with data_type and dims only, got unknown fields or enum values"),
        (b"\x08\x63\x10\x02", "PARAMS_HEADER", "tensor 0: expected a TensorDesc with data_type and dims only, got no known data_type"),
        (b"\x08\x09\x10\x02", "PARAMS_DTYPE", "tensor 0: expected an element type, got VarType 9"),
    ],
)  # fmt: skip
def test_tensor_descriptions_are_checked(desc: bytes, code: str, message: str) -> None:
    e = failure(with_desc(desc))
    assert (e.code, e.message) == (code, message)


@pytest.mark.parametrize(
    ("dims", "code", "message"),
    [
        ([-1], "PARAMS_DIMS", "tensor 0: expected dims >= 0, got [-1]"),
        ([2, -3], "PARAMS_DIMS", "tensor 0: expected dims >= 0, got [2, -3]"),
        ([2**62, 2], "PARAMS_DIMS", f"tensor 0: expected a byte size below 2**63, got dims {[2**62, 2]}"),
        ([1] * 65, "PARAMS_DIMS", "tensor 0: expected rank <= 64, got 65"),
        ([2**30, 2**30], "PARAMS_TRUNCATED", f"tensor 0: expected {2**62} bytes of data for dims "
         f"{[2**30, 2**30]}, got 0"),
    ],
)  # fmt: skip
def test_dims_are_checked_before_any_allocation(dims: list[int], code: str, message: str) -> None:
    desc = pb.VarType.TensorDesc(data_type=pb.VarType.FP32, dims=dims).SerializeToString()
    e = failure(with_desc(desc))
    assert (e.code, e.message) == (code, message)


def test_lod_data_is_never_read() -> None:
    # A LoD level of 1 would be followed by a u64 byte count; the reader stops at the level.
    data = struct.pack("<IQQ", 0, 1, 2**63) + bytes(8)
    assert failure(data).code == "PARAMS_HEADER"
