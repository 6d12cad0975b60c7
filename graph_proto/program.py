"""Parses untrusted .pdmodel bytes into a ProgramDesc: size cap first, then completeness checks."""

from __future__ import annotations

import functools
from typing import Final

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, unknown_fields
from google.protobuf import message as _message
from google.protobuf.internal import api_implementation

from graph_proto import framework_pb2 as pb
from graph_proto.errors import FormatError

DEFAULT_MAX_PROGRAM_BYTES: Final = 64 * 1024 * 1024
# Paddle <= 2.x wrote ProgramDesc.op_compatible_map as field 3; it is informational only.
_LEGACY_PROGRAM_FIELDS: Final = frozenset({3})
_LEGACY_PATHS: Final = frozenset(f"program#{n}" for n in _LEGACY_PROGRAM_FIELDS)
_LENGTH_DELIMITED: Final = 2
_MAX_VISITS: Final = 100_000
_MAX_REPORTED: Final = 5


def require_upb_backend() -> None:
    """Refuses to parse with protobuf's pure-Python backend (CVE-2025-4565 recursion)."""
    backend = api_implementation.Type()
    if backend != "upb":
        raise RuntimeError(
            f"protobuf backend must be 'upb' to parse untrusted bytes, got {backend!r}"
        )


def parse_program(data: bytes, *, max_bytes: int = DEFAULT_MAX_PROGRAM_BYTES) -> pb.ProgramDesc:
    """Returns the ProgramDesc in `data`, or raises FormatError; never parses over `max_bytes`."""
    require_upb_backend()
    if not data:
        raise FormatError("PROGRAM_EMPTY", "expected a ProgramDesc, got 0 bytes")
    if len(data) > max_bytes:
        raise FormatError(
            "PROGRAM_TOO_LARGE", f"expected at most {max_bytes} bytes, got {len(data)}; not parsed"
        )
    text_ok = _text_is_utf8(data)
    program = pb.ProgramDesc()
    try:
        program.ParseFromString(data)
    except (_message.DecodeError, RecursionError, ValueError) as e:
        raise FormatError(
            "PROGRAM_MALFORMED", f"expected a ProgramDesc protobuf, got undecodable bytes ({e})"
        ) from None
    if not text_ok:
        # NOTE: upb does not check UTF-8 in proto2 strings; they would read back as bytes.
        raise FormatError(
            "PROGRAM_MALFORMED", "expected UTF-8 text in every string field, got invalid bytes"
        )
    if not program.IsInitialized():
        missing = _missing_fields(program, "", _MAX_REPORTED + 1)
        shown = ", ".join(missing[:_MAX_REPORTED]) + (
            " ..." if len(missing) > _MAX_REPORTED else ""
        )
        raise FormatError("PROGRAM_MISSING_FIELD", f"required fields are missing: {shown}")
    _reject_unknown_fields(program, data)
    return program


def _missing_fields(msg: _message.Message, path: str, limit: int) -> list[str]:
    """The first `limit` absent required fields, without listing all of them (there may be
    millions: FindInitializationErrors would allocate a string for each)."""
    missing = [
        f"{path}{f.name}"
        for f in msg.DESCRIPTOR.fields
        if f.is_required and not msg.HasField(f.name)
    ]
    for descriptor, value in msg.ListFields():
        if descriptor.message_type is None:
            continue
        children = enumerate(value) if descriptor.is_repeated else [(None, value)]
        for i, child in children:
            if len(missing) >= limit:
                return missing[:limit]
            if not child.IsInitialized():
                where = f"{path}{descriptor.name}{'' if i is None else f'[{i}]'}."
                missing.extend(_missing_fields(child, where, limit - len(missing)))
    return missing[:limit]


@functools.cache
def _utf8_checker() -> type[_message.Message]:
    """ProgramDesc under another name, as an edition-2023 message whose strings upb UTF-8-checks
    while parsing (in C); same field numbers, so the same bytes parse the same way."""
    file = descriptor_pb2.FileDescriptorProto()
    pb.DESCRIPTOR.CopyToProto(file)
    old, new = f".{file.package}.", ".graphgate.utf8_check."
    file.name, file.package = "graphgate/utf8_check.proto", new.strip(".")
    file.syntax, file.edition = "editions", descriptor_pb2.EDITION_2023
    file.options.features.enum_type = descriptor_pb2.FeatureSet.CLOSED  # proto2 enums
    file.options.features.utf8_validation = descriptor_pb2.FeatureSet.VERIFY
    messages = list(file.message_type)
    while messages:
        message = messages.pop()
        messages.extend(message.nested_type)
        for field in message.field:
            if field.HasField("type_name"):
                field.type_name = field.type_name.replace(old, new, 1)
            if field.label == field.LABEL_REQUIRED:  # editions spell `required` as a feature
                field.label = field.LABEL_OPTIONAL
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{new[1:]}ProgramDesc"))


def _text_is_utf8(data: bytes) -> bool:
    """False when the bytes fail to parse as the UTF-8-checking twin of ProgramDesc (for any
    reason; the caller parses them again to tell bad text from bad bytes)."""
    try:
        _utf8_checker()().ParseFromString(data)
    except (_message.DecodeError, RecursionError, ValueError):
        return False
    return True


def _reject_unknown_fields(program: pb.ProgramDesc, data: bytes) -> None:
    """Unknown fields (and out-of-range enum values, which upb keeps as unknown) are rejected."""
    size = program.ByteSize()
    program.DiscardUnknownFields()
    unknown_bytes = size - program.ByteSize()
    if unknown_bytes == 0:
        return
    # Slow path, only on bad or legacy input: parse again to find where the unknown fields were.
    original = pb.ProgramDesc()
    original.ParseFromString(data)
    if unknown_bytes == _legacy_bytes(original):
        return
    budget = [_MAX_VISITS]  # locating them costs Python time per message: bounded
    illegal = [p for p in _unknown_paths(original, "program", budget) if p not in _LEGACY_PATHS]
    shown = ", ".join(illegal[:_MAX_REPORTED]) + (" ..." if len(illegal) > _MAX_REPORTED else "")
    raise FormatError(
        "PROGRAM_UNKNOWN_FIELD",
        "expected only fields and enum values of Paddle's framework.proto, got unknown "
        + (shown or f"ones beyond the first {_MAX_VISITS} messages"),
    )


def _legacy_bytes(program: pb.ProgramDesc) -> int:
    """Wire size of the top-level legacy fields (length-delimited, as Paddle wrote them)."""
    total = 0
    unknown = unknown_fields.UnknownFieldSet(program)
    for field in (unknown[i] for i in range(len(unknown))):
        if field.field_number in _LEGACY_PROGRAM_FIELDS and field.wire_type == _LENGTH_DELIMITED:
            tag = field.field_number << 3 | _LENGTH_DELIMITED
            total += _varint_size(tag) + _varint_size(len(field.data)) + len(field.data)
    return total


def _varint_size(value: int) -> int:
    return max(1, (value.bit_length() + 6) // 7)


def _unknown_paths(msg: _message.Message, path: str, budget: list[int]) -> list[str]:
    budget[0] -= 1
    if budget[0] < 0:
        return []
    unknown = unknown_fields.UnknownFieldSet(msg)
    paths = [f"{path}#{unknown[i].field_number}" for i in range(len(unknown))]
    for descriptor, value in msg.ListFields():
        if descriptor.message_type is None:
            continue
        if not descriptor.is_repeated:
            paths.extend(_unknown_paths(value, f"{path}.{descriptor.name}", budget))
            continue
        for i, child in enumerate(value):
            if budget[0] < 0:
                break
            paths.extend(_unknown_paths(child, f"{path}.{descriptor.name}[{i}]", budget))
    return paths
