"""Lowers a ValidatedProgram to ONNX, gates it, and runs it with onnxruntime per-request Scopes."""

from __future__ import annotations

from executor.device import Device, say_device_once, session_device
from executor.errors import ExecutionError
from executor.servable import build_servable, check_servable, prepare_servable
from executor.session import CompiledModel, RunCancel, SessionOptions, compile

__all__ = [
    "CompiledModel",
    "Device",
    "ExecutionError",
    "RunCancel",
    "SessionOptions",
    "build_servable",
    "check_servable",
    "compile",
    "prepare_servable",
    "say_device_once",
    "session_device",
]
