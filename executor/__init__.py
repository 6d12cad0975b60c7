"""Lowers a ValidatedProgram to ONNX and runs it with onnxruntime (executor issue)."""
