"""parse_program: untrusted .pdmodel bytes in, a complete ProgramDesc or a FormatError out."""

from __future__ import annotations

import pytest
from google.protobuf.internal import api_implementation

from graph_proto import framework_pb2 as pb
from graph_proto.errors import FormatError
from graph_proto.program import DEFAULT_MAX_PROGRAM_BYTES, parse_program, require_upb_backend
from graph_proto.types import DType
from tests.support.builders import BOOKKEEPING_ATTRS, GraphBuilder, V, affine, conv, varint


def program_bytes() -> bytes:
    """conv() plus an op carrying Paddle's bookkeeping attrs (strings of every kind)."""
    g = conv()
    g.op("relu", {"X": ["act"]}, {"Out": ["act2"]}, BOOKKEEPING_ATTRS)
    return g.program_bytes()


def failure(data: bytes, **kwargs: int) -> FormatError:
    with pytest.raises(FormatError) as info:
        parse_program(data, **kwargs)
    return info.value


def test_round_trip_is_exact() -> None:
    data = program_bytes()
    program = parse_program(data)
    assert program.SerializeToString() == data
    assert program == pb.ProgramDesc.FromString(data)


def test_a_program_without_optional_fields_parses() -> None:
    minimal = pb.ProgramDesc(blocks=[pb.BlockDesc(idx=0, parent_idx=-1)])
    assert parse_program(minimal.SerializeToString()) == minimal


def test_the_backend_is_upb() -> None:
    assert api_implementation.Type() == "upb"
    require_upb_backend()


def test_the_pure_python_backend_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(api_implementation, "Type", lambda: "python")
    with pytest.raises(RuntimeError, match=r"protobuf backend must be 'upb'.*got 'python'"):
        parse_program(program_bytes())


def test_empty_bytes() -> None:
    e = failure(b"")
    assert (e.code, e.message) == ("PROGRAM_EMPTY", "expected a ProgramDesc, got 0 bytes")


def test_the_cap_applies_before_parsing() -> None:
    data = program_bytes()
    e = failure(data, max_bytes=len(data) - 1)
    assert e.code == "PROGRAM_TOO_LARGE"
    assert e.message == f"expected at most {len(data) - 1} bytes, got {len(data)}; not parsed"
    assert parse_program(data, max_bytes=len(data)).ByteSize() == len(data)
    assert DEFAULT_MAX_PROGRAM_BYTES == 64 * 1024 * 1024


def test_every_truncation_is_a_format_error_or_a_shorter_program() -> None:
    data = program_bytes()
    for size in range(1, len(data)):
        try:
            parse_program(data[:size])
        except FormatError as e:
            assert e.code in {"PROGRAM_MALFORMED", "PROGRAM_MISSING_FIELD"}


def test_missing_required_fields_are_listed() -> None:
    g = affine()
    for var in g.block(0).vars:
        var.ClearField("type")
    g.block(0).ClearField("parent_idx")
    e = failure(g.program.SerializePartialToString())
    assert e.code == "PROGRAM_MISSING_FIELD"
    assert e.message == (
        "required fields are missing: blocks[0].parent_idx, blocks[0].vars[0].type, "
        "blocks[0].vars[1].type, blocks[0].vars[2].type, blocks[0].vars[3].type ..."
    )


def test_unknown_fields_are_rejected_with_their_path() -> None:
    g = affine()
    g.block(0).vars[1].type.dense_tensor.tensor.MergeFromString(b"\x18\x07")  # field 3
    e = failure(g.program_bytes())
    assert e.code == "PROGRAM_UNKNOWN_FIELD"
    assert e.message.endswith("got unknown program.blocks[0].vars[1].type.dense_tensor.tensor#3")


def test_unknown_enum_values_are_rejected() -> None:
    g = affine()
    g.block(0).ops[0].attrs[0].MergeFromString(b"\x10\x63")  # AttrType 99
    e = failure(g.program_bytes())
    assert e.code == "PROGRAM_UNKNOWN_FIELD"
    assert "program.blocks[0].ops[0].attrs[0]#2" in e.message


def test_legacy_op_compatible_map_is_accepted_and_dropped() -> None:
    data = program_bytes()
    legacy = data + b"\x1a\x04\x0a\x02\x08\x01"  # ProgramDesc field 3, Paddle <= 2.x
    assert parse_program(legacy).SerializeToString() == data


def test_packed_and_unpacked_dims_both_parse() -> None:
    unpacked = pb.VarType.TensorDesc(data_type=pb.VarType.FP32, dims=[-1, 3]).SerializeToString()
    assert unpacked == b"\x08\x05\x10\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01\x10\x03"
    packed = b"\x08\x05\x12\x0b\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01\x03"
    g = affine()
    tensor = g.block(0).vars[1].type.dense_tensor.tensor
    tensor.Clear()
    tensor.MergeFromString(packed)
    program = parse_program(g.program_bytes())
    assert list(program.blocks[0].vars[1].type.dense_tensor.tensor.dims) == [-1, 3]


@pytest.mark.parametrize("depth", [101, 10_000, 1_000_000])
def test_deep_group_nesting_is_malformed_not_a_recursion_error(depth: int) -> None:
    e = failure(program_bytes() + b"\x4b" * depth + b"\x4c" * depth)
    assert e.code == "PROGRAM_MALFORMED"


def test_shallow_group_nesting_is_an_unknown_field() -> None:
    e = failure(program_bytes() + b"\x4b" * 10 + b"\x4c" * 10)
    assert e.code == "PROGRAM_UNKNOWN_FIELD"
    assert e.message.endswith("got unknown program#9")


@pytest.mark.parametrize("old", [b"pool2d", b"image", b"NCHW", b"secret", b"assign_value"])
def test_invalid_utf8_strings_are_malformed(old: bytes) -> None:
    # upb does not check UTF-8 in proto2 strings: they would read back as bytes.
    g = conv()
    g.op("relu", {"X": ["act"]}, {"Out": ["act2"]}, BOOKKEEPING_ATTRS)
    g.program.op_version_map.pair.add(op_name="assign_value", op_version=pb.OpVersion(version=1))
    data = g.program_bytes()
    assert old in data
    e = failure(data.replace(old, b"\xff" * len(old), 1))
    assert (e.code, e.message) == (
        "PROGRAM_MALFORMED",
        "expected UTF-8 text in every string field, got invalid bytes",
    )


def test_missing_fields_are_found_without_listing_millions() -> None:
    block = pb.BlockDesc(idx=0, parent_idx=-1).SerializeToString() + b"\x22\x00" * 1_000_000
    e = failure(b"\x0a" + varint(len(block)) + block)
    assert e.message == (
        "required fields are missing: blocks[0].ops[0].type, blocks[0].ops[1].type, "
        "blocks[0].ops[2].type, blocks[0].ops[3].type, blocks[0].ops[4].type ..."
    )


def test_non_ascii_utf8_is_text() -> None:
    g = GraphBuilder()
    g.feed("x", DType.FP32, [1])
    g.node("relu", {"X": ["x"]}, {"Out": [V("ünïcode", [1])]})
    assert parse_program(g.program_bytes()).blocks[0].vars[-1].name == "ünïcode"


def test_legacy_field_beside_an_unknown_one_is_still_rejected() -> None:
    legacy = program_bytes() + b"\x1a\x04\x0a\x02\x08\x01" + b"\xf8\x06\x01"
    e = failure(legacy)
    assert e.message.endswith("got unknown program#111")


def test_unknown_fields_far_inside_a_huge_program_are_rejected_quickly() -> None:
    ops = b"\x22\x03\x1a\x01a" * 200_000 + b"\x22\x06\x1a\x01a\xf8\x06\x01"
    block = pb.BlockDesc(idx=0, parent_idx=-1).SerializeToString() + ops
    e = failure(b"\x0a" + varint(len(block)) + block)
    assert e.code == "PROGRAM_UNKNOWN_FIELD"
    assert e.message.endswith("got unknown ones beyond the first 100000 messages")
