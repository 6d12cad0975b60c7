"""Every declared case of every registered op; never edited when an op is added."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from tests.ops.cases import infer_case, reference_outputs
from validator.ops import FAMILIES, REGISTRY, Case, GraphError, NoAttrs, OpDef, TensorType

CASES = [
    pytest.param(op, case, id=f"{op.op_type}-{i}")
    for op in REGISTRY
    for i, case in enumerate(op.cases)
]


@pytest.mark.parametrize(("op", "case"), CASES)
def test_op_case(op: OpDef, case: Case) -> None:
    if case.raises is not None:
        with pytest.raises(GraphError, match=re.escape(case.raises)) as info:
            infer_case(op, case)
        if case.code is not None:
            assert getattr(info.value, "decode_code", info.value.code) == case.code
        return
    expected = reference_outputs(op, case)
    inferred = infer_case(op, case)
    assert [_seen_dims(t, e) for t, e in zip(inferred, expected, strict=True)] == [
        list(e.shape) for e in expected
    ]
    assert [t.dtype.numpy for t in inferred] == [e.dtype for e in expected]


def _seen_dims(t: TensorType, e: np.ndarray) -> list[int]:
    """The inferred dims, where a data-dependent dim (-1 with a bound) counts as the reference's
    size when that size is within its bound."""
    bound = t.bound or (-1,) * t.rank
    return [
        got if d == -1 and 0 <= got <= b else d
        for d, b, got in zip(t.shape, bound, e.shape, strict=False)
    ]


def test_every_op_has_a_valid_and_an_invalid_case() -> None:
    no_valid = [op.op_type for op in REGISTRY if not any(c.expect for c in op.cases)]
    no_invalid = [op.op_type for op in REGISTRY if not any(c.raises for c in op.cases)]
    assert (no_valid, no_invalid) == ([], [])


def test_every_invalid_case_pins_its_diagnostic_code() -> None:
    unpinned = [
        f"{op.op_type}-{i}"
        for op in REGISTRY
        for i, c in enumerate(op.cases)
        if c.raises is not None and c.code is None
    ]
    assert unpinned == []


def test_every_case_is_either_valid_or_invalid() -> None:
    both_or_neither = [
        op.op_type for op in REGISTRY for c in op.cases if (c.expect is None) == (c.raises is None)
    ]
    assert both_or_neither == []


def test_every_opdef_in_a_family_module_is_registered() -> None:
    registered = {id(op) for op in REGISTRY}
    forgotten = [
        f"{family.__name__}.{name}"
        for family in FAMILIES
        for name, value in vars(family).items()
        if isinstance(value, OpDef) and id(value) not in registered
    ]
    assert forgotten == []


def test_every_op_documents_itself_and_declares_typed_attrs() -> None:
    undocumented = [op.op_type for op in REGISTRY if not op.doc.strip()]
    untyped = [
        op.op_type
        for op in REGISTRY
        if op.attrs is not NoAttrs and not dataclasses.is_dataclass(op.attrs)
    ]
    assert (undocumented, untyped) == ([], [])
