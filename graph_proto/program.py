"""Parses untrusted .pdmodel bytes into a ProgramDesc: size cap first, then completeness checks."""

from __future__ import annotations

from typing import Final

from google.protobuf import message as _message
from google.protobuf import unknown_fields
from google.protobuf.internal import api_implementation

from graph_proto import framework_pb2 as pb
from graph_proto.errors import FormatError

DEFAULT_MAX_PROGRAM_BYTES: Final = 64 * 1024 * 1024
# Paddle <= 2.x wrote ProgramDesc.op_compatible_map as field 3; it is informational only.
_LEGACY_PROGRAM_FIELDS: Final = frozenset({3})
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
    program = pb.ProgramDesc()
    try:
        program.ParseFromString(data)
    except (_message.DecodeError, RecursionError, ValueError) as e:
        raise FormatError(
            "PROGRAM_MALFORMED", f"expected a ProgramDesc protobuf, got undecodable bytes ({e})"
        ) from None
    if not program.IsInitialized():
        missing: list[str] = program.FindInitializationErrors()  # type: ignore[attr-defined]
        shown = ", ".join(missing[:_MAX_REPORTED]) + (
            " ..." if len(missing) > _MAX_REPORTED else ""
        )
        raise FormatError(
            "PROGRAM_MISSING_FIELD", f"required fields are missing: {shown} ({len(missing)} in all)"
        )
    _reject_unknown_fields(program, data)
    return program


def _reject_unknown_fields(program: pb.ProgramDesc, data: bytes) -> None:
    """Unknown fields (and out-of-range enum values, which upb keeps as unknown) are rejected."""
    size = program.ByteSize()
    program.DiscardUnknownFields()
    if program.ByteSize() == size:
        return
    # Slow path, only on bad or legacy input: parse again to find where the unknown fields were.
    original = pb.ProgramDesc()
    original.ParseFromString(data)
    legacy = {f"program#{n}" for n in _LEGACY_PROGRAM_FIELDS}
    illegal = [p for p in _unknown_paths(original, "program") if p not in legacy]
    if illegal:
        shown = ", ".join(illegal[:_MAX_REPORTED]) + (
            " ..." if len(illegal) > _MAX_REPORTED else ""
        )
        raise FormatError(
            "PROGRAM_UNKNOWN_FIELD",
            f"expected only fields and enum values of Paddle's framework.proto, got unknown {shown}",
        )


def _unknown_paths(msg: _message.Message, path: str) -> list[str]:
    unknown = unknown_fields.UnknownFieldSet(msg)
    paths = [f"{path}#{unknown[i].field_number}" for i in range(len(unknown))]
    for descriptor, value in msg.ListFields():
        if descriptor.message_type is None:
            continue
        children = value if descriptor.is_repeated else [value]
        for i, child in enumerate(children):
            paths.extend(_unknown_paths(child, f"{path}.{descriptor.name}[{i}]"))
    return paths
