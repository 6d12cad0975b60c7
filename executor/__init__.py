"""Lowers a ValidatedProgram to ONNX, gates it, and runs it with onnxruntime per-request Scopes."""

from __future__ import annotations

from executor.errors import ExecutionError
from executor.servable import build_servable, check_servable, prepare_servable
from executor.session import CompiledModel, RunCancel, SessionOptions, compile

__all__ = [
    "CompiledModel",
    "ExecutionError",
    "RunCancel",
    "SessionOptions",
    "build_servable",
    "check_servable",
    "compile",
    "prepare_servable",
]
