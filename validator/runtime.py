"""Run-time InferShape: the compile-time rules re-run with a request's concrete feed dims."""

from __future__ import annotations

from collections.abc import Mapping

from graph_proto.types import Shape
from validator.infer import infer_op
from validator.ops._def import GraphError, Scalar, TensorType
from validator.validate import ValidatedProgram


class RuntimeShapeError(GraphError):
    """The request's concrete dims make an op inconsistent (e.g. two feeds disagree on a dim)."""

    def __init__(self, op_index: int, op_type: str, error: GraphError) -> None:
        super().__init__(f"op {op_index} ({op_type}): {error}")
        self.op_index = op_index
        self.op_type = op_type
        self.cause = error


def reinfer(
    program: ValidatedProgram,
    feed_shapes: Mapping[str, Shape],
    feed_values: Mapping[str, tuple[Scalar, ...]] | None = None,
) -> dict[str, TensorType]:
    """Types of every var for these concrete feed shapes (and the values of small integer feeds,
    which fix the sizes of data-dependent tensors); raises RuntimeShapeError."""
    values = feed_values or {}
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
            types.update(infer_op(op, types))
        except GraphError as e:
            raise RuntimeShapeError(op.index, op.op_type, e) from None
    return types
