"""Lowers a ValidatedProgram to ONNX, gates it, and runs it with onnxruntime per-request Scopes."""

from __future__ import annotations

from executor.errors import ExecutionError
from executor.servable import check_servable
from executor.session import CompiledModel, SessionOptions, compile

__all__ = ["CompiledModel", "ExecutionError", "SessionOptions", "check_servable", "compile"]
