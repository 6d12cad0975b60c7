"""Compile-time validation of untrusted Paddle programs: structure, allowlist, shapes, budgets."""

from __future__ import annotations

from validator.diagnostics import Code, Diagnostic, Severity, ValidationFailed
from validator.ops import GraphError, Scalar, TensorType
from validator.policy import DEFAULT_POLICY, Policy
from validator.report import Report, TensorSpec
from validator.validate import ValidatedProgram, validate

__all__ = [
    "DEFAULT_POLICY",
    "Code",
    "Diagnostic",
    "GraphError",
    "Policy",
    "Report",
    "Scalar",
    "Severity",
    "TensorSpec",
    "TensorType",
    "ValidatedProgram",
    "ValidationFailed",
    "validate",
]
