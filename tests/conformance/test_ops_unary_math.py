"""Unary math, pow, scale, clip, cast, assign built by real Paddle: attrs accepted, dims match.

CASES, in families/unary_math.py, is checked by test_ops_parity.py (dims and outputs against
Paddle's)."""

from __future__ import annotations

import pytest

from tests.conformance.families.activation import (
    Build,
    op,
)
from tests.conformance.families.unary_math import FLT_MAX, with_scalar_inputs
from tests.conformance.paddle_util import build_and_save
from validator import Code, ValidationFailed, validate

pytestmark = pytest.mark.paddle


@pytest.mark.parametrize(
    ("build", "code", "fragment"),
    [
        (
            op("clip", {"min": 2.0, "max": 1.0}),
            Code.ATTR_VALUE,
            "expected min <= max, got min=2.0 and max=1.0",
        ),
        (
            with_scalar_inputs("scale", {"ScaleTensor": [2]}, {}),
            Code.SHAPE_MISMATCH,
            "ScaleTensor: expected a tensor of 1 element, got dims [2]",
        ),
    ],
)
def test_rejects_bad_attrs_paddle_writes(build: Build, code: Code, fragment: str) -> None:
    saved = build_and_save(build)
    with pytest.raises(ValidationFailed) as info:
        validate(saved.program, saved.params)
    assert info.value.codes == [code]
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("build", "fragment"),
    [
        # Eigen's integer pow never returns for a negative exponent (Paddle hangs).
        (op("pow", {"factor": -1.0}, dtype="int64"), "factor: expected >= 0 for int64 X, got -1.0"),
        (
            op("pow", {"factor": 3e9}, dtype="int32"),
            "factor: expected a value that converts to int32",
        ),
        # FLT_MAX casts to INT_MIN, and Paddle's kernel then fails on max < min.
        (
            op("clip", {"min": 0.0, "max": FLT_MAX}, dtype="int32"),
            "max: expected a value that converts to int32",
        ),
        (
            op("scale", {"scale": 1e10}, dtype="int32"),
            "scale: expected a value that converts to int32",
        ),
    ],
)
def test_rejects_attrs_paddle_cannot_compute(build: Build, fragment: str) -> None:
    saved = build_and_save(build)
    with pytest.raises(ValidationFailed) as info:
        validate(saved.program, saved.params)
    assert info.value.codes == [Code.ATTR_VALUE]
    assert fragment in str(info.value)
