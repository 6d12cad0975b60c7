"""Every op family's table of cases (CASES in test_ops_<family>.py) against real Paddle: the dims
graphgate infers equal the dims Paddle records, and graphgate's outputs equal those of Paddle's
Executor (floats within the case's tolerance, integers and booleans exactly)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.conformance import (
    test_ops_activation,
    test_ops_creation,
    test_ops_ecosystem,
    test_ops_elementwise,
    test_ops_index,
    test_ops_linalg,
    test_ops_manipulation,
    test_ops_nn,
    test_ops_reduce,
    test_ops_resize,
    test_ops_unary_math,
)
from tests.conformance.op_cases import Case, randomized
from tests.conformance.paddle_util import assert_parity, dims_differences, op_types

pytestmark = pytest.mark.paddle

FAMILIES = {
    "activation": test_ops_activation.CASES,
    "creation": test_ops_creation.CASES,
    "ecosystem": test_ops_ecosystem.CASES,
    "elementwise": test_ops_elementwise.CASES,
    "index": test_ops_index.CASES,
    "linalg": test_ops_linalg.CASES,
    "manipulation": test_ops_manipulation.CASES,
    "nn": test_ops_nn.CASES,
    "reduce": test_ops_reduce.CASES,
    "resize": test_ops_resize.CASES,
    "unary_math": test_ops_unary_math.CASES,
}


def cases(selected: Callable[[Case], bool]) -> list[Any]:
    """The selected cases of every family, with ids `<family>-<case name>`."""
    return [
        pytest.param(case, id=f"{family}-{name}")
        for family, table in FAMILIES.items()
        for name, case in table.items()
        if selected(case)
    ]


@pytest.mark.parametrize("case", cases(lambda case: case.dims))
def test_dims_match_paddle(case: Case) -> None:
    saved = case.saved()
    assert case.op_type in op_types(saved.program)
    assert dims_differences(case.validate(saved), saved.program) == []


@pytest.mark.parametrize("case", cases(lambda case: case.outputs))
def test_outputs_match_paddle(case: Case) -> None:
    saved = case.saved()
    assert case.op_type in op_types(saved.program)
    saved = randomized(saved) if case.random_params else saved
    validated = case.validate(saved)
    rtol, atol = case.tolerance
    for feeds in case.feed_runs(validated):
        assert_parity(
            saved, feeds, rtol=rtol, atol=atol, validate_args=(case.policy, case.registry)
        )
