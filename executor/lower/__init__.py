"""ONNX lowering of every registered op, one module per validator/ops/ family (same file names)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from executor.lower import (
    activation,
    control,
    creation,
    detection,
    elementwise,
    index,
    io,
    linalg,
    manipulation,
    nn,
    norm,
    pool,
    reduce,
    resize,
    rnn,
    slicing,
    spatial,
    unary_math,
)
from executor.lower._builder import (
    IR_VERSION,
    ONNX_DTYPE,
    ONNX_OPSET,
    LoweringError,
    OnnxBuilder,
    Value,
)

FAMILIES: Final = (
    io,
    elementwise,
    nn,
    norm,
    pool,
    manipulation,
    slicing,
    reduce,
    linalg,
    activation,
    unary_math,
    creation,
    resize,
    spatial,
    index,
    rnn,
    detection,
    control,
)
EMITTERS: Final[dict[str, Callable[..., Any]]] = {
    op_type: emit for family in FAMILIES for op_type, emit in family.EMITTERS.items()
}
# Ops the converter lowers itself, not through an emitter: feed and fetch (the graph's inputs
# and outputs) and the ops owning a sub-block (ONNX If and Loop subgraphs, executor/convert.py).
BOUNDARY_OPS: Final = io.BOUNDARY_OPS | control.BLOCK_OPS

__all__ = [
    "BOUNDARY_OPS",
    "EMITTERS",
    "FAMILIES",
    "IR_VERSION",
    "ONNX_DTYPE",
    "ONNX_OPSET",
    "LoweringError",
    "OnnxBuilder",
    "Value",
]
