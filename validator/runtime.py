"""Run-time InferShape: the compile-time rules re-run with a request's concrete feed dims, and,
once the program has run, with the branch each block-0 select_input took."""

from __future__ import annotations

from collections.abc import Mapping

from graph_proto.types import Shape
from validator.bind import BoundOp
from validator.infer import infer_op
from validator.ops import GraphError, Scalar, TensorType
from validator.ops.control import SELECT_INPUT
from validator.validate import ValidatedProgram


class RuntimeShapeError(GraphError):
    """The request's concrete dims make an op inconsistent (e.g. two feeds disagree on a dim)."""

    def __init__(self, op_index: int, op_type: str, error: GraphError) -> None:
        super().__init__(f"op {op_index} ({op_type}): {error}")
        self.op_index = op_index
        self.op_type = op_type
        self.cause = error


def branches_differ(op: BoundOp) -> bool:
    """True for a select_input whose two branch values have different compile-time types (as
    recorded at the op): only knowing which branch ran gives its Out exact dims (the other
    select_inputs merge nothing).
    NOTE: two branch values typed alike but with unknown dims from different feeds are not
    caught: at run time the dims they disagree on stay unknown, as before."""
    if op.op_type != SELECT_INPUT.op_type:
        return False
    first, second = (op.types_in[name] for name in op.inputs["X"])
    return first != second


def reinfer(
    program: ValidatedProgram,
    feed_shapes: Mapping[str, Shape],
    feed_values: Mapping[str, tuple[Scalar, ...]] | None = None,
    taken: Mapping[int, int] | None = None,
) -> dict[str, TensorType]:
    """Types of every var for these concrete feed shapes (and the values of small integer feeds,
    which fix the sizes of data-dependent tensors); raises RuntimeShapeError. `taken`: the Mask
    value a run gave each block-0 select_input, by op index; such a select_input's Out takes
    exactly the type of the branch value it picked, instead of the dims both branches share."""
    values = feed_values or {}
    masks = taken or {}
    types: dict[str, TensorType] = {
        name: TensorType(program.types[name].dtype, tuple(array.shape))
        for name, array in program.params.items()
    }
    for spec in program.inputs:
        types[spec.name] = TensorType(
            spec.dtype, tuple(feed_shapes[spec.name]), values.get(spec.name)
        )
    for op in program.ops:
        try:
            inferred = infer_op(op, types)
        except GraphError as e:
            raise RuntimeShapeError(op.index, op.op_type, e) from None
        mask = masks.get(op.index)
        if mask is not None and op.op_type == SELECT_INPUT.op_type:
            inferred = _picked(op, types, mask)
        types.update(inferred)
    return types


def _picked(op: BoundOp, types: Mapping[str, TensorType], mask: int) -> dict[str, TensorType]:
    # NOTE: the lowering casts Mask to bool, so any non-zero value picks X[1], as here.
    (out,) = op.outputs["Out"]
    return {out: types[op.inputs["X"][1 if mask else 0]]}
