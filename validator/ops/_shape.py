"""Shape arithmetic shared by op rules; -1 is an unknown dim and propagates as Paddle's InferMeta does."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from graph_proto.types import UNKNOWN, DType, Shape, dtype_from_vartype
from validator.ops._def import AttrError, AxisError, EmptyDimError, ShapeError, TensorType


def norm_axis(axis: int, rank: int, *, what: str = "axis") -> int:
    """Maps a possibly negative axis into [0, rank); rejects anything outside [-rank, rank)."""
    if rank == 0:
        raise AxisError(f"{what} {axis} needs an input of rank >= 1, got a 0-D tensor")
    if not -rank <= axis < rank:
        raise AxisError(f"{what} must be in [{-rank}, {rank}), got {axis}")
    return axis + rank if axis < 0 else axis


def norm_axes(axes: Sequence[int], rank: int, *, what: str = "axis") -> tuple[int, ...]:
    """Normalizes several axes and rejects repeats."""
    normalized = tuple(norm_axis(a, rank, what=what) for a in axes)
    if len(set(normalized)) != len(normalized):
        raise AxisError(f"{what} must not repeat, got {list(axes)}")
    return normalized


def merge_dim(a: int, b: int, what: str) -> int:
    """Two dims that must be equal: the known one wins; two different known ones are an error."""
    if a >= 0 and b >= 0 and a != b:
        raise ShapeError(f"{what}: expected equal sizes, got {a} and {b}")
    return a if a >= 0 else b


def broadcast_dim(a: int, b: int, what: str = "broadcast") -> int:
    if a == 1:
        return b
    if b == 1:
        return a
    if a < 0 or b < 0:
        # Paddle keeps the known dim when the other may be 1 or equal to it.
        known = a if a >= 0 else b
        return known if known > 1 else UNKNOWN
    if a != b:
        raise ShapeError(f"{what}: expected dims that are equal or 1, got {a} and {b}")
    return a


def broadcast(x: Shape, y: Shape) -> Shape:
    """numpy broadcasting, right-aligned."""
    rank = max(len(x), len(y))
    xs = (1,) * (rank - len(x)) + x
    ys = (1,) * (rank - len(y)) + y
    try:
        return tuple(broadcast_dim(a, b) for a, b in zip(xs, ys, strict=True))
    except ShapeError:
        pass
    # Again, with the message naming both shapes (built only when it is needed: this runs for
    # every elementwise op of every inference).
    what = f"cannot broadcast {list(x)} with {list(y)}"
    return tuple(broadcast_dim(a, b, what) for a, b in zip(xs, ys, strict=True))


def product(dims: Sequence[int]) -> int:
    """Product of dims, UNKNOWN if any is unknown."""
    result = 1
    for d in dims:
        if d < 0:
            return UNKNOWN
        result *= d
    return result


def require_rank(x: TensorType, ranks: Sequence[int] | range, what: str = "input") -> None:
    if x.rank not in ranks:
        expected = f"{ranks[0]}..{ranks[-1]}" if isinstance(ranks, range) else list(ranks)
        raise AxisError(f"{what}: expected rank {expected}, got {x.rank} (dims {list(x.shape)})")


def require_nonempty(x: TensorType, axes: Sequence[int] | None = None, what: str = "input") -> None:
    """Rejects a zero-size dim (on `axes`, or anywhere) where the op would divide by it."""
    dims = x.shape if axes is None else tuple(x.shape[a] for a in axes)
    if 0 in dims:
        raise EmptyDimError(f"{what}: expected non-zero dims, got {list(x.shape)}")


def window_out(size: int, kernel: int, stride: int, pad: int, dilation: int = 1) -> int:
    """Output length of a conv/pool window (pad is the sum of both sides)."""
    if size < 0:
        return UNKNOWN
    span = dilation * (kernel - 1) + 1
    if size + pad < span:
        raise ShapeError(
            f"window of {span} (kernel {kernel}, dilation {dilation}) does not fit an input of "
            f"{size} with padding {pad}"
        )
    return (size + pad - span) // stride + 1


def positive(values: Sequence[int], what: str) -> None:
    if any(v <= 0 for v in values):
        raise ShapeError(f"{what} must be > 0, got {list(values)}")


# NOTE: Paddle's DDim holds at most 9 dims; rank-carrying inputs (shape tensors, shape attrs)
# beyond that are rejected before a tuple of that many dims is built.
MAX_RANK: Final = 9
VALUE_LIMIT: Final = 64  # constants of up to this many elements carry their values


def dtype_attr(value: int, what: str = "dtype") -> DType:
    """The DType named by a VarType number in an attribute (cast, fill_constant, arg_max...)."""
    dtype = dtype_from_vartype(value)
    if dtype is None:
        raise AttrError(f"{what} must be a supported VarType number, got {value}")
    return dtype
