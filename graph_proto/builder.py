"""Authors ProgramDescs and .pdiparams in Python, without Paddle (tests, examples, users)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from graph_proto import framework_pb2 as pb
from graph_proto.pdiparams import write_params
from graph_proto.types import DType

INT32_MIN: Final = -(2**31)
INT32_MAX: Final = 2**31 - 1
FEED_HOLDER: Final = "feed"
FETCH_HOLDER: Final = "fetch"


@dataclass(frozen=True, slots=True)
class Attr:
    """An attribute with an explicit AttrType, for values whose Python type is ambiguous."""

    kind: int  # pb.AttrType value
    value: Any


def set_attr(attr: pb.OpDesc.Attr, name: str, value: Any) -> None:
    """Fills an OpDesc.Attr, choosing the AttrType from the Python value unless it is an Attr."""
    attr.name = name
    kind, value = (value.kind, value.value) if isinstance(value, Attr) else (_kind_of(value), value)
    attr.type = kind  # type: ignore[assignment]
    if kind == pb.INT:
        attr.i = value
    elif kind == pb.LONG:
        attr.l = value
    elif kind == pb.FLOAT:
        attr.f = value
    elif kind == pb.FLOAT64:
        attr.float64 = value
    elif kind == pb.STRING:
        attr.s = value
    elif kind == pb.BOOLEAN:
        attr.b = value
    elif kind == pb.BLOCK:
        attr.block_idx = value
    elif kind == pb.SCALAR:
        _set_scalar(attr.scalar, value)
    else:
        _set_list(attr, kind, value)


def _set_list(attr: pb.OpDesc.Attr, kind: int, values: Sequence[Any]) -> None:
    if kind == pb.SCALARS:
        for value in values:
            _set_scalar(attr.scalars.add(), value)
        return
    fields: dict[int, Any] = {
        pb.INTS: attr.ints,
        pb.LONGS: attr.longs,
        pb.FLOATS: attr.floats,
        pb.FLOAT64S: attr.float64s,
        pb.STRINGS: attr.strings,
        pb.BOOLEANS: attr.bools,
        pb.BLOCKS: attr.blocks_idx,
    }
    fields[kind].extend(values)


def _set_scalar(scalar: pb.Scalar, value: bool | int | float) -> None:
    if isinstance(value, bool):
        scalar.type, scalar.b = pb.Scalar.BOOLEAN, value
    elif isinstance(value, int):
        scalar.type, scalar.i = pb.Scalar.LONG, value
    else:
        scalar.type, scalar.r = pb.Scalar.FLOAT64, float(value)


def _kind_of(value: Any) -> int:
    if isinstance(value, bool):
        return pb.BOOLEAN
    if isinstance(value, int):
        return pb.INT if INT32_MIN <= value <= INT32_MAX else pb.LONG
    if isinstance(value, float):
        return pb.FLOAT
    if isinstance(value, str):
        return pb.STRING
    if isinstance(value, (list, tuple)):
        return _list_kind_of(value)
    raise TypeError(f"cannot infer an AttrType for {value!r}; wrap it in Attr(kind, value)")


def _list_kind_of(values: Sequence[Any]) -> int:
    if all(isinstance(v, bool) for v in values) and values:
        return pb.BOOLEANS
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        fits = all(INT32_MIN <= v <= INT32_MAX for v in values)
        return pb.INTS if fits else pb.LONGS
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return pb.FLOATS
    if all(isinstance(v, str) for v in values):
        return pb.STRINGS
    raise TypeError(f"cannot infer an AttrType for {values!r}; wrap it in Attr(kind, value)")


class ProgramBuilder:
    """Appends vars and ops to block 0 (or a sub-block) and keeps parameters for .pdiparams.

    Vars written by ops need a VarDesc with dtype and dims; pass `dtype`/`dims` to `op()` via
    `var()`, or let `validator.complete_program` fill them in from shape inference.
    """

    def __init__(self) -> None:
        self.program = pb.ProgramDesc()
        self.program.version.version = 3003001
        block = self.program.blocks.add()
        block.idx, block.parent_idx = 0, -1
        self._params: dict[str, tuple[DType, np.ndarray]] = {}
        self._feeds = 0
        self._fetches = 0

    def block(self, idx: int = 0) -> pb.BlockDesc:
        return self.program.blocks[idx]

    def add_block(self, parent: int = 0) -> int:
        """Adds an empty sub-block and returns its index."""
        block = self.program.blocks.add()
        block.idx, block.parent_idx = len(self.program.blocks) - 1, parent
        return block.idx

    def var(
        self,
        name: str,
        dtype: DType | int | None = DType.FP32,
        dims: Sequence[int] = (),
        *,
        persistable: bool = False,
        vartype: int = pb.VarType.DENSE_TENSOR,
        block: int = 0,
    ) -> str:
        var = self.block(block).vars.add()
        var.name = name
        var.type.type = vartype  # type: ignore[assignment]
        if persistable:
            var.persistable = True
        if vartype == pb.VarType.DENSE_TENSOR and dtype is not None:
            var.type.dense_tensor.tensor.data_type = int(dtype)  # type: ignore[assignment]
            var.type.dense_tensor.tensor.dims.extend(dims)
        return name

    def feed(self, name: str, dtype: DType, dims: Sequence[int]) -> str:
        """Declares a feed target and its feed op (col in call order)."""
        self._holder(FEED_HOLDER, pb.VarType.FEED_MINIBATCH)
        self.var(name, dtype, dims)
        self.block(0).vars[-1].need_check_feed = True
        self.op("feed", {"X": [FEED_HOLDER]}, {"Out": [name]}, {"col": self._feeds})
        self._feeds += 1
        return name

    def fetch(self, name: str) -> None:
        self._holder(FETCH_HOLDER, pb.VarType.FETCH_LIST)
        self.op("fetch", {"X": [name]}, {"Out": [FETCH_HOLDER]}, {"col": self._fetches})
        self._fetches += 1

    def param(self, name: str, value: np.ndarray, dtype: DType | None = None) -> str:
        """Declares a persistable var whose data goes into the .pdiparams."""
        dtype = dtype if dtype is not None else _dtype_of(value)
        self.var(name, dtype, value.shape, persistable=True)
        self._params[name] = (dtype, value)
        return name

    def op(
        self,
        op_type: str,
        inputs: Mapping[str, Sequence[str]],
        outputs: Mapping[str, Sequence[str]],
        attrs: Mapping[str, Any] | None = None,
        *,
        block: int = 0,
    ) -> pb.OpDesc:
        op = self.block(block).ops.add()
        op.type = op_type
        for slot, names in inputs.items():
            op.inputs.add(parameter=slot, arguments=list(names))
        for slot, names in outputs.items():
            op.outputs.add(parameter=slot, arguments=list(names))
        for name, value in (attrs or {}).items():
            set_attr(op.attrs.add(), name, value)
        return op

    def program_bytes(self) -> bytes:
        return self.program.SerializeToString()

    def params_bytes(self) -> bytes | None:
        """The .pdiparams (tensors in sorted name order), or None when there are no parameters."""
        if not self._params:
            return None
        return write_params(self._params[name] for name in sorted(self._params))

    def _holder(self, name: str, vartype: int) -> None:
        if not any(v.name == name for v in self.block(0).vars):
            self.var(name, None, persistable=True, vartype=vartype)


def _dtype_of(value: np.ndarray) -> DType:
    for dtype in DType:
        if dtype != DType.BF16 and dtype.numpy == value.dtype.newbyteorder("<"):
            return dtype
    raise TypeError(f"no Paddle dtype for numpy {value.dtype}")
