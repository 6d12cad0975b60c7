"""Int-list operands given as an attribute or as tensors, and the values of small tensors.

Shape arithmetic (`shape` -> `slice` -> `concat` -> `reshape2`) works because small int tensors
carry their values (TensorType.value); the rules here read them and pass them on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

import numpy as np

from graph_proto.types import INDICES, UNKNOWN, Shape, numel
from validator.ops._def import AttrError, DTypeError, ShapeError, TensorType
from validator.ops._shape import MAX_RANK, VALUE_LIMIT

# oneDNN and quantizer flags ("extra" attrs) that exporters may leave on data-movement ops.
BACKEND_ATTRS: Final = frozenset(
    {"use_mkldnn", "use_onednn", "mkldnn_data_type", "onednn_data_type", "use_quantizer"}
)

Operand = list[int | None]  # one int per element; None where only the run time knows it
Source = tuple[str, TensorType | tuple[TensorType, ...] | None]


def check_rank(rank: int) -> None:
    if rank > MAX_RANK:
        raise ShapeError(f"expected a result of rank <= {MAX_RANK}, got {rank}")


def _index_dtype(t: TensorType, slot: str) -> None:
    if t.dtype not in INDICES:
        raise DTypeError(f"input {slot!r}: expected int32 or int64, got {t.dtype.label}")


def _from_tensor(t: TensorType, slot: str) -> Operand:
    """The elements of a 1-D int tensor standing for a list attribute (shape, axes, starts)."""
    _index_dtype(t, slot)
    if t.rank > 1 or not t.known:
        raise ShapeError(
            f"input {slot!r}: expected a 1-D tensor of known length, got {list(t.shape)}"
        )
    count = numel(t.shape)
    if count > MAX_RANK:  # every such list has one entry per dim at most
        raise ShapeError(f"input {slot!r}: expected at most {MAX_RANK} elements, got {count}")
    if t.value is not None and len(t.value) == count:
        return [int(v) for v in t.value]
    return [None] * count


def _from_list(ts: Sequence[TensorType], slot: str) -> Operand:
    """One int per 1-element tensor of a list slot (ShapeTensor, StartsTensorList...)."""
    values: Operand = []
    for t in ts:
        _index_dtype(t, slot)
        if t.rank > 1 or (t.rank == 1 and t.shape[0] not in (1, UNKNOWN)):
            raise ShapeError(f"input {slot!r}: expected 1-element tensors, got {list(t.shape)}")
        values.append(int(t.value[0]) if t.value is not None and len(t.value) == 1 else None)
    return values


def int_operand(attr: Sequence[int], *sources: Source) -> Operand:
    """An int list as Paddle takes it at run time: the first given tensor source, else the attr.

    NOTE: at compile time Paddle mostly reads the attribute, where Python wrote placeholders for
    the tensor elements; we read the tensors (their values when known) as the run time does.
    """
    for slot, given in sources:
        if isinstance(given, tuple):
            if given:
                return _from_list(given, slot)
        elif given is not None:
            return _from_tensor(given, slot)
    operand: Operand = list(attr)
    return operand


def int_scalar(t: TensorType, slot: str) -> int | None:
    """The value of a 1-element int tensor (AxisTensor); None when unknown."""
    (value,) = _from_list((t,), slot)
    return value


def constant_axis(t: TensorType, slot: str) -> int:
    """An axis given by a tensor must be a constant (threats.md 7.12): ONNX needs it statically."""
    value = int_scalar(t, slot)
    if value is None:
        raise AttrError(f"{slot}: expected a constant axis, got a value known only at run time")
    return value


def array(x: TensorType) -> np.ndarray | None:
    """X's values as an array, when inference knows them."""
    if x.value is None or not x.known or len(x.value) != numel(x.shape):
        return None
    return np.array(x.value).reshape(x.shape)


def carry_selection(
    x: TensorType, shape: Shape, select: Callable[[np.ndarray], np.ndarray]
) -> Shape | TensorType:
    """`carry` for an op that only picks elements of X (no arithmetic): where X's value is known
    in part (TensorType.partial), the picked elements' value when all of them are known, else
    the part known of them."""
    known = carry(x, shape, select)
    if isinstance(known, TensorType) or x.partial is None or not all(d >= 0 for d in shape):
        return known
    picked = np.asarray(select(np.array(x.partial, dtype=object).reshape(x.shape))).reshape(-1)
    elements = tuple(picked.tolist())
    if None in elements:
        return TensorType(x.dtype, shape, partial=elements) if len(shape) == 1 else shape
    return TensorType(x.dtype, shape, elements)


def carry(
    x: TensorType, shape: Shape, fn: Callable[..., np.ndarray], *more: TensorType
) -> Shape | TensorType:
    """The output shape, with `fn(values of x, *more)` riding along when known and small."""
    if not all(d >= 0 for d in shape) or numel(shape) > VALUE_LIMIT:
        return shape
    arrays = [array(t) for t in (x, *more)]
    if any(a is None for a in arrays):
        return shape
    value = np.asarray(fn(*arrays)).reshape(shape)
    return TensorType(x.dtype, shape, tuple(value.reshape(-1).tolist()))
