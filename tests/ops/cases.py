"""Runs one declared op case through the real attribute decoder and shape/dtype rule."""

from __future__ import annotations

from typing import Any

import numpy as np

from graph_proto import framework_pb2 as pb
from graph_proto.builder import set_attr
from graph_proto.types import INTEGERS, DType
from validator.attrs import AttrDecodeError, decode_attrs, raw_attrs
from validator.diagnostics import Code
from validator.infer import infer_values
from validator.ops import Case, GraphError, OpDef, TensorType

VALUE_LIMIT = 64  # small integer inputs carry their values, as shape arithmetic does


def dtype_of(array: np.ndarray) -> DType:
    for dtype in DType:
        if dtype != DType.BF16 and dtype.numpy == array.dtype.newbyteorder("<"):
            return dtype
    raise TypeError(f"no DType for numpy {array.dtype}")


def tensor_type(array: np.ndarray) -> TensorType:
    dtype = dtype_of(array)
    value = None
    if (dtype in INTEGERS or dtype == DType.BOOL) and array.size <= VALUE_LIMIT:
        value = tuple(array.reshape(-1).tolist())
    return TensorType(dtype, tuple(array.shape), value)


class CaseAttrError(GraphError):
    """An attribute the decoder rejects (missing, unknown, mistyped), raised like a rule's error."""

    def __init__(self, error: AttrDecodeError) -> None:
        super().__init__(str(error))
        self.decode_code: Code = error.code


def decoded_attrs(op: OpDef, case: Case) -> Any:
    desc = pb.OpDesc(type=op.op_type)
    for name, value in case.attrs.items():
        set_attr(desc.attrs.add(), name, value)
    try:
        return decode_attrs(op.attrs, raw_attrs(desc), op.ignored_attrs)
    except AttrDecodeError as e:
        raise CaseAttrError(e) from None


def input_values(op: OpDef, case: Case) -> list[Any]:
    """Inputs in slot order: arrays, tuples of arrays (variadic) or None (absent optional)."""
    return [case.inputs.get(slot.slot) for slot in op.inputs]


def infer_case(op: OpDef, case: Case) -> list[TensorType]:
    """Inferred types of the used outputs, flattened (variadic outputs expanded)."""
    attrs = decoded_attrs(op, case)
    values: list[Any] = []
    for value in input_values(op, case):
        if value is None:
            values.append(None)
        elif isinstance(value, tuple):
            values.append(tuple(tensor_type(v) for v in value))
        else:
            values.append(tensor_type(value))
    flat: list[TensorType] = []
    for result in infer_values(op, values, attrs):
        flat.extend(result if isinstance(result, tuple) else (result,))
    return flat


def reference_outputs(op: OpDef, case: Case) -> list[np.ndarray]:
    assert case.expect is not None
    expected = case.expect(*input_values(op, case), decoded_attrs(op, case))
    items = expected if isinstance(expected, (tuple, list)) else (expected,)
    flat: list[np.ndarray] = []
    for item in items:
        flat.extend(np.asarray(x) for x in (item if isinstance(item, (tuple, list)) else (item,)))
    return flat
