"""pad3d, nearest/bilinear interpolation, pixel_shuffle and flip built by real Paddle: accepted,
with the dims Paddle records (-1 spatial dims, size and scale tensors included).

CASES, in families/resize.py, is checked by test_ops_parity.py (dims and outputs against
Paddle's)."""

from __future__ import annotations

import pytest

# Imported first: paddle_util switches Paddle to legacy programs before importing it.
pytest.importorskip("tests.conformance.paddle_util")

from tests.conformance.families.resize import N4, POLICY, PROGRAMS, REGISTRY, F, image
from tests.conformance.op_cases import Build
from tests.conformance.paddle_util import (
    build_and_save,
    recorded_types,
)
from validator import Code, ValidationFailed, validate

pytestmark = pytest.mark.paddle


def test_constant_paddings_tensor_gives_known_dims() -> None:
    saved = build_and_save(PROGRAMS["pad5d_constant_paddings_tensor"][1])
    validated = validate(saved.program, saved.params, POLICY, REGISTRY)
    (out,) = saved.fetches
    assert recorded_types(saved.program)[out][1] == (-1, 3, -1, -1, -1)  # Paddle: a tensor
    assert validated.types[out].shape == (-1, 3, 8, 12, 12)


def test_size_from_shape_arithmetic_gives_known_dims() -> None:
    saved = build_and_save(PROGRAMS["nearest_size_from_shape"][1])
    validated = validate(saved.program, saved.params, POLICY, REGISTRY)
    (out,) = saved.fetches
    assert recorded_types(saved.program)[out][1] == (2, 3, -1, -1)
    assert validated.types[out].shape == (2, 3, 16, 12)


@pytest.mark.parametrize(
    ("build", "code", "fragment"),
    [
        (image(lambda x: F.pad(x, [9, 0, 0, 0], mode="reflect"), N4), Code.SHAPE_MISMATCH, "reflect paddings must be < the padded size 8 of axis 4, got 9 and 0"),
        (image(lambda x: F.interpolate(x, scale_factor=0.1), N4), Code.SHAPE_MISMATCH, "scale 0.1 turns size 8 into 0; expected a size >= 1"),
        (image(lambda x: F.pad(x, [1, 0, 0, 0], mode="replicate"), [-1, 3, 0, 8]), Code.EMPTY_DIM, "expected non-zero dims"),
    ],
    ids=["reflect_too_wide", "scale_to_zero", "replicate_empty"],
)  # fmt: skip
def test_programs_paddle_builds_but_cannot_run_are_refused(
    build: Build, code: Code, fragment: str
) -> None:
    # NOTE: Paddle's compile-time rules accept these (recording -1 or the padded size); its
    # kernels fail on them at run time.
    saved = build_and_save(build)
    with pytest.raises(ValidationFailed) as info:
        validate(saved.program, saved.params, POLICY, REGISTRY)
    assert info.value.codes == [code]
    assert fragment in str(info.value)
