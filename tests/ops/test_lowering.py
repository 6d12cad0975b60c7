"""Every declared case of every registered op, lowered to ONNX and run by onnxruntime, equals
its numpy reference; never edited when an op is added."""

from __future__ import annotations

import numpy as np
import pytest

from executor.lower import BOUNDARY_OPS, EMITTERS
from tests.ops.cases import reference_outputs
from tests.ops.lowered import run_lowered
from validator.ops import REGISTRY, Case, OpDef

RUNNABLE = [
    pytest.param(op, case, id=f"{op.op_type}-{i}")
    for op in REGISTRY
    if op.op_type not in BOUNDARY_OPS
    for i, case in enumerate(op.cases)
    if case.expect is not None
]


@pytest.mark.parametrize(("op", "case"), RUNNABLE)
def test_lowered_op_matches_the_numpy_reference(op: OpDef, case: Case) -> None:
    expected = reference_outputs(op, case)
    got = run_lowered(op, case)
    assert [g.shape for g in got] == [e.shape for e in expected]
    assert [g.dtype for g in got] == [e.dtype for e in expected]
    for g, e in zip(got, expected, strict=True):
        if np.issubdtype(e.dtype, np.floating):
            np.testing.assert_allclose(g, e, rtol=case.rtol, atol=case.atol)
        else:
            np.testing.assert_array_equal(g, e)


def test_every_registered_op_has_exactly_one_lowering() -> None:
    registered = {op.op_type for op in REGISTRY} - BOUNDARY_OPS
    assert (sorted(registered - EMITTERS.keys()), sorted(EMITTERS.keys() - registered)) == ([], [])
