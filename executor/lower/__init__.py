"""ONNX lowering of every registered op, one module per validator/ops/ family (same file names)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from executor.lower import elementwise, io
from executor.lower._builder import IR_VERSION, ONNX_OPSET, LoweringError, OnnxBuilder, Value

FAMILIES: Final = (io, elementwise)
EMITTERS: Final[dict[str, Callable[..., Any]]] = {
    op_type: emit for family in FAMILIES for op_type, emit in family.EMITTERS.items()
}
BOUNDARY_OPS: Final = io.BOUNDARY_OPS

__all__ = [
    "BOUNDARY_OPS",
    "EMITTERS",
    "FAMILIES",
    "IR_VERSION",
    "ONNX_OPSET",
    "LoweringError",
    "OnnxBuilder",
    "Value",
]
