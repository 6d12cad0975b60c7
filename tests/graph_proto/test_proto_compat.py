"""framework.proto stays wire-compatible with Paddle's, and the generated code stays in sync."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import descriptor_pb2

from graph_proto import framework_pb2, regenerate


def _file_proto(descriptor: Any) -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto()
    descriptor.CopyToProto(proto)
    return proto


def _wire_view(file: descriptor_pb2.FileDescriptorProto) -> dict[str, Any]:
    """Everything that decides how bytes parse, keyed by full name; order and comments ignored."""
    view: dict[str, Any] = {"package": file.package, "syntax": file.syntax or "proto2"}

    def message(prefix: str, m: descriptor_pb2.DescriptorProto) -> None:
        name = f"{prefix}.{m.name}"
        view[name] = sorted(
            (f.number, f.name, f.label, f.type, f.type_name, f.default_value) for f in m.field
        )
        view[f"{name}/reserved"] = sorted((r.start, r.end) for r in m.reserved_range)
        for nested in m.nested_type:
            message(name, nested)
        for e in m.enum_type:
            view[f"{name}.{e.name}"] = sorted((v.number, v.name) for v in e.value)

    for m in file.message_type:
        message(file.package, m)
    for e in file.enum_type:
        view[f"{file.package}.{e.name}"] = sorted((v.number, v.name) for v in e.value)
    return view


@pytest.mark.paddle
def test_descriptor_matches_paddles_own() -> None:
    from paddle.base.proto import framework_pb2 as paddle_pb2

    from tests.conformance import paddle_util  # noqa: F401  (sets the legacy flag first)

    ours = _wire_view(_file_proto(framework_pb2.DESCRIPTOR))
    theirs = _wire_view(_file_proto(paddle_pb2.DESCRIPTOR))
    assert ours == theirs


@pytest.mark.paddle
def test_programs_round_trip_between_both_schemas() -> None:
    from paddle.base.proto import framework_pb2 as paddle_pb2

    from graph_proto.builder import ProgramBuilder
    from graph_proto.types import DType
    from tests.conformance import paddle_util  # noqa: F401

    builder = ProgramBuilder()
    builder.feed("x", DType.FP32, [-1, 3])
    builder.fetch("x")
    data = builder.program_bytes()
    assert paddle_pb2.ProgramDesc.FromString(data).SerializeToString() == data


def test_generated_code_does_not_drift_from_the_proto() -> None:
    assert regenerate.main(["--check"]) == 0
