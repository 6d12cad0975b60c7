"""The one answer to "is this program servable": what `graphgate check`, `/v1/check` and upload
all ask, so that a program one of them passes the others do not reject."""

from __future__ import annotations

from collections.abc import Mapping

from executor.lower import LoweringError
from executor.session import CompiledModel, Prepared, SessionOptions, build, prepare
from validator import Diagnostic, GraphError, Policy, ValidationFailed, validate


def check_servable(
    program: bytes,
    params: bytes | None,
    policy: Policy,
    options: SessionOptions | None = None,
    dims: Mapping[str, int] | None = None,
) -> CompiledModel:
    """Validates, lowers, gates and builds the onnxruntime session.

    Raises ValidationFailed whatever the stage that refuses: the validator's diagnostics as
    they are, or one diagnostic for a lowering, gate or session-build failure (each a graphgate
    bug once validation passed, with its own code; a lowering one names the op). `dims`: sizes
    declared for unknown input dims (validator/dims.py)."""
    return build_servable(prepare_servable(program, params, policy, dims), options)


def prepare_servable(
    program: bytes,
    params: bytes | memoryview | None,
    policy: Policy,
    dims: Mapping[str, int] | None = None,
) -> Prepared:
    """`check_servable` up to the session: validation, lowering and gate (ValidationFailed)."""
    validated = validate(program, params, policy, dims=dims)
    try:
        return prepare(validated)
    except GraphError as e:
        raise ValidationFailed([compile_diagnostic(e)]) from None


def build_servable(prepared: Prepared, options: SessionOptions | None = None) -> CompiledModel:
    """`check_servable`'s last step: the session (ValidationFailed when onnxruntime refuses)."""
    try:
        return build(prepared, options or SessionOptions())
    except GraphError as e:
        raise ValidationFailed([compile_diagnostic(e)]) from None


def compile_diagnostic(error: GraphError) -> Diagnostic:
    """A compile-stage failure as a diagnostic, located at the op when the lowering knows it."""
    if isinstance(error, LoweringError):
        return Diagnostic(
            error.code,
            str(error),
            block=error.block,
            op_index=error.op_index,
            op_type=error.op_type,
        )
    return Diagnostic(error.code, str(error))
