"""Decodes OpDesc attributes into an op's typed attrs dataclass, checking every AttrType."""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from graph_proto import framework_pb2 as pb
from validator.diagnostics import Code

# Attributes Paddle attaches to every op for bookkeeping; they never change semantics, and
# op_callstack holds absolute paths of the exporting script, so they are dropped, never stored.
COMMON_ATTRS: Final = frozenset(
    {
        "op_role",
        "op_role_var",
        "op_namescope",
        "op_callstack",
        "op_device",
        "with_quant_attr",
    }
)


@dataclass(frozen=True, slots=True)
class BlockRef:
    """The value of a BLOCK attribute: the index of a sub-block."""

    idx: int


class AttrDecodeError(ValueError):
    def __init__(self, code: Code, message: str) -> None:
        super().__init__(message)
        self.code = code


_SCALAR_FIELDS: Final = {1: "b", 2: "i", 3: "r"}  # Scalar.Type -> field; COMPLEX128 unsupported
_NAMES: Final[dict[int, str]] = {int(value): name for name, value in pb.AttrType.items()}


def attr_value(attr: pb.OpDesc.Attr) -> Any:
    """The Python value of one attribute (tuples for lists)."""
    kind = attr.type
    if kind == pb.INT:
        return attr.i
    if kind == pb.LONG:
        return attr.l
    if kind == pb.FLOAT:
        return attr.f
    if kind == pb.FLOAT64:
        return attr.float64
    if kind == pb.STRING:
        return attr.s
    if kind == pb.BOOLEAN:
        return attr.b
    if kind == pb.BLOCK:
        return BlockRef(attr.block_idx)
    if kind == pb.SCALAR:
        return _scalar(attr.scalar)
    if kind == pb.SCALARS:
        return tuple(_scalar(s) for s in attr.scalars)
    if kind in _LIST_FIELDS:
        return tuple(getattr(attr, _LIST_FIELDS[kind]))
    raise AttrDecodeError(
        Code.ATTR_TYPE,
        f"attribute {attr.name!r}: expected a constant value, got AttrType {_NAMES.get(kind, kind)}"
        " (values computed from variables are not supported)",
    )


_LIST_FIELDS: Final = {
    pb.INTS: "ints",
    pb.LONGS: "longs",
    pb.FLOATS: "floats",
    pb.FLOAT64S: "float64s",
    pb.STRINGS: "strings",
    pb.BOOLEANS: "bools",
    pb.BLOCKS: "blocks_idx",
}


def _scalar(scalar: pb.Scalar) -> int | float | bool:
    field = _SCALAR_FIELDS.get(scalar.type)
    if field is None:
        raise AttrDecodeError(
            Code.ATTR_TYPE, f"expected a real scalar, got Scalar type {scalar.type}"
        )
    value: int | float | bool = getattr(scalar, field)
    return value


def raw_attrs(op: pb.OpDesc) -> dict[str, tuple[int, Any]]:
    """name -> (AttrType, value) for every attribute but Paddle's bookkeeping ones."""
    raw: dict[str, tuple[int, Any]] = {}
    for attr in op.attrs:
        if attr.name in COMMON_ATTRS:
            continue
        if attr.name in raw:
            raise AttrDecodeError(Code.ATTR_VALUE, f"attribute {attr.name!r} is given twice")
        raw[attr.name] = (attr.type, attr_value(attr))
    return raw


# Which AttrTypes may carry a value for each Python annotation of an attrs field.
_ACCEPTS: Final[dict[Any, frozenset[int]]] = {
    int: frozenset({pb.INT, pb.LONG}),
    float: frozenset({pb.FLOAT, pb.FLOAT64}),
    bool: frozenset({pb.BOOLEAN}),
    str: frozenset({pb.STRING}),
    BlockRef: frozenset({pb.BLOCK}),
    tuple[int, ...]: frozenset({pb.INTS, pb.LONGS}),
    tuple[float, ...]: frozenset({pb.FLOATS, pb.FLOAT64S}),
    tuple[str, ...]: frozenset({pb.STRINGS}),
    tuple[bool, ...]: frozenset({pb.BOOLEANS}),
    tuple[int | float | bool, ...]: frozenset({pb.SCALARS}),
    int | float | bool: frozenset({pb.SCALAR}),
}


@dataclass(frozen=True, slots=True)
class _Field:
    accepts: frozenset[int]
    required: bool


_SCHEMAS: dict[type[Any], Mapping[str, _Field]] = {}


def _schema(cls: type[Any]) -> Mapping[str, _Field]:
    cached = _SCHEMAS.get(cls)
    if cached is None:
        cached = _SCHEMAS[cls] = _build_schema(cls)
    return cached


def _build_schema(cls: type[Any]) -> Mapping[str, _Field]:
    hints = typing.get_type_hints(cls)
    fields: dict[str, _Field] = {}
    for f in dataclasses.fields(cls):
        annotation = hints[f.name]
        accepts = _ACCEPTS.get(annotation)
        if accepts is None and isinstance(annotation, types.UnionType):
            # `X | None`: an optional attribute of type X.
            args = tuple(a for a in typing.get_args(annotation) if a is not type(None))
            accepts = _ACCEPTS.get(args[0] if len(args) == 1 else functools.reduce(_or, args))
        if accepts is None:
            raise TypeError(f"{cls.__name__}.{f.name}: unsupported attr annotation {annotation}")
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        fields[f.name] = _Field(accepts, required)
    return fields


def _or(a: Any, b: Any) -> Any:
    return a | b


def decode_attrs(
    cls: type[Any], raw: Mapping[str, tuple[int, Any]], ignored: frozenset[str] = frozenset()
) -> Any:
    """Builds the op's attrs dataclass from raw attrs; unknown, missing or mistyped ones fail."""
    schema = _schema(cls)
    if unexpected := sorted(raw.keys() - schema.keys() - ignored):
        raise AttrDecodeError(
            Code.ATTR_UNKNOWN,
            f"expected attributes from {sorted(schema)}, got unknown {unexpected}",
        )
    if missing := sorted(n for n, f in schema.items() if f.required and n not in raw):
        raise AttrDecodeError(Code.ATTR_MISSING, f"missing required attributes {missing}")
    values: dict[str, Any] = {}
    for name, f in schema.items():
        if name not in raw:
            continue
        kind, value = raw[name]
        if kind not in f.accepts:
            expected = " or ".join(sorted(_NAMES[k] for k in f.accepts))
            raise AttrDecodeError(
                Code.ATTR_TYPE,
                f"attribute {name!r}: expected AttrType {expected}, got {_NAMES.get(kind, kind)}",
            )
        values[name] = value
    return cls(**values)
