"""Matches the .pdiparams tensors to the persistable VarDescs (sorted by name) and checks them."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from graph_proto.errors import FormatError
from graph_proto.pdiparams import array, read_params
from graph_proto.types import DType
from validator.diagnostics import Code, Diagnostic
from validator.ops import TensorType


def match_params(
    params_bytes: bytes | memoryview | None,
    persistable: list[str],
    declared: Mapping[str, TensorType],
    out: list[Diagnostic],
) -> dict[str, np.ndarray]:
    """name -> read-only view into params_bytes; problems go to `out`."""
    if not persistable:
        if params_bytes:
            out.append(
                Diagnostic(
                    code=Code.PARAMS_UNEXPECTED,
                    message=f"expected no .pdiparams (no persistable vars), got {len(params_bytes)} bytes",
                )
            )
        return {}
    if params_bytes is None:
        out.append(
            Diagnostic(
                code=Code.PARAMS_MISSING,
                message=f"expected a .pdiparams holding {len(persistable)} tensors, got none",
            )
        )
        return {}
    try:
        tensors = read_params(params_bytes, len(persistable))
    except FormatError as e:
        var = persistable[e.index] if e.index is not None and e.index < len(persistable) else None
        out.append(Diagnostic(code=Code[e.code], message=e.message, var=var))
        return {}
    params: dict[str, np.ndarray] = {}
    for name, tensor in zip(persistable, tensors, strict=True):
        expected = declared.get(name)
        if expected is None:
            continue  # the VarDesc itself was already rejected
        if tensor.dtype != expected.dtype:
            got = tensor.dtype.label if tensor.dtype is not None else f"VarType {tensor.vartype}"
            out.append(_mismatch(Code.PARAMS_DTYPE, name, expected.dtype, got))
        elif tensor.dims != expected.shape:
            out.append(
                Diagnostic(
                    code=Code.PARAMS_DIMS,
                    message=f"expected dims {list(expected.shape)} as declared, got {list(tensor.dims)} in the file",
                    var=name,
                )
            )
        else:
            params[name] = array(params_bytes, tensor)
    return params


def _mismatch(code: Code, name: str, expected: DType, got: str) -> Diagnostic:
    return Diagnostic(
        code=code, message=f"expected {expected.label} as declared, got {got} in the file", var=name
    )
