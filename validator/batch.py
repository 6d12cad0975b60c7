"""The batch-independence proof: may requests be concatenated along axis 0, run once, and split?

The batch dimension is a symbol that enters at every feed whose VarDesc has a dynamic (-1) dim 0,
and is tracked var by var (at which axis it sits) through each op's declared batch rule
(validator/ops/_batch.py). The program is batchable iff every feed has it at axis 0, every
fetched var carries it at axis 0, and no op couples rows; otherwise the report names the first
op that does ("block 0, op 17 (reduce_mean): reduces over the batch dimension").
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from validator.bind import BoundOp
from validator.ops import BatchView, Couples, OpDef, TensorType

_FEED: Final = "feed"
_FETCH: Final = "fetch"


@dataclass(frozen=True, slots=True)
class BatchProof:
    batchable: bool
    coupling: str | None = None  # why not, naming the first op that couples rows


def prove_batchable(ops: Sequence[BoundOp], feeds: Mapping[str, TensorType]) -> BatchProof:
    """Walks block 0 in order; `feeds` are the feed targets' declared types."""
    batched: dict[str, int] = {}  # var -> the axis that carries the batch
    for op in ops:
        try:
            _step(op, feeds, batched)
        except Couples as e:
            return BatchProof(False, f"block {op.block}, op {op.index} ({op.op_type}): {e}")
    return BatchProof(True)


def _step(op: BoundOp, feeds: Mapping[str, TensorType], batched: dict[str, int]) -> None:
    if op.op_type == _FEED:
        _feed(op, feeds, batched)
    elif op.op_type == _FETCH:
        _fetch(op, batched)
    else:
        _check_sub_blocks(op, batched)
        axes = {slot: tuple(batched.get(v) for v in names) for slot, names in op.inputs.items()}
        types_in = {slot: tuple(op.types_in[v] for v in names) for slot, names in op.inputs.items()}
        types_out = {
            slot: tuple(op.types_out[v] for v in op.outputs.get(slot, ()))
            for slot in (o.slot for o in op.op_def.used_outputs)
        }
        out_axes = output_axes(op.op_def, BatchView(axes, types_in, types_out, op.attrs))
        for slot, names in op.outputs.items():
            for name in names:
                axis = out_axes.get(slot)
                if axis is None:
                    batched.pop(name, None)
                else:
                    batched[name] = axis


def output_axes(op_def: OpDef, view: BatchView) -> dict[str, int | None]:
    """The batch axis of each used output slot (None: no batch); raises Couples."""
    if not view.batched():
        return {}
    if op_def.batch is None:
        raise Couples("declares no batch rule, so rows cannot be proven independent")
    result = op_def.batch(view)
    axes: dict[str, int | None] = (
        dict.fromkeys(view.types_out, result) if isinstance(result, int) else dict(result)
    )
    for slot, axis in axes.items():
        if axis is not None and any(_data_sized(t, axis) for t in view.types_out.get(slot, ())):
            raise Couples(
                f"expected output {slot!r} to carry the batch dimension at axis {axis}, got a "
                "dim there that the data decides (bounded, not the batch)"
            )
    return axes


def _data_sized(t: TensorType, axis: int) -> bool:
    """A dim the data decides (NMS's kept boxes: TensorType.bound) is never the batch dim."""
    return t.bound is not None and axis < t.rank and t.shape[axis] < 0 and t.bound[axis] >= 0


def _feed(op: BoundOp, feeds: Mapping[str, TensorType], batched: dict[str, int]) -> None:
    (name,) = op.outputs["Out"]
    dims = feeds[name].shape
    if not dims or dims[0] >= 0:
        raise Couples(
            f"expected a dynamic batch dimension (-1) at axis 0 of feed {name!r}, got dims {list(dims)}"
        )
    batched[name] = 0


def _fetch(op: BoundOp, batched: dict[str, int]) -> None:
    (name,) = op.inputs["X"]
    axis = batched.get(name)
    if axis != 0:
        got = "no batch dimension" if axis is None else f"the batch dimension at axis {axis}"
        raise Couples(
            f"expected fetched {name!r} to carry the batch dimension at axis 0, got {got}"
        )


def _check_sub_blocks(op: BoundOp, batched: Mapping[str, int]) -> None:
    """A sub-block may read enclosing vars that its owner's slots do not list."""
    for name in _sub_block_reads(op):
        if name in batched:
            raise Couples(
                f"runs a sub-block that reads batched {name!r}: one branch or trip count "
                "decides for every row"
            )


def _sub_block_reads(op: BoundOp) -> Iterator[str]:
    for block in op.blocks:
        for inner in block:
            yield from inner.reads()
            yield from _sub_block_reads(inner)
