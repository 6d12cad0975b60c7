"""Reshape, transpose, squeeze, concat, split, slice, expand and tile built by real Paddle:
accepted, with the dims and dtypes Paddle records (more where shape arithmetic is folded).

CASES, in families/manipulation.py, is checked by test_ops_parity.py (dims and outputs against
Paddle's)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

# Imported first: paddle_util switches Paddle to legacy programs before importing it.
pytest.importorskip("tests.conformance.paddle_util")

from executor.lower import BOUNDARY_OPS, EMITTERS
from tests.conformance.families.manipulation import PROGRAMS, SIZES, Build, S, i32, with_ints
from tests.conformance.paddle_util import (
    Saved,
    assert_parity,
    build_and_save,
    dims_differences,
    op_types,
    paddle,
    random_feeds,
    recorded_types,
)
from validator import validate
from validator.diagnostics import ValidationFailed

pytestmark = pytest.mark.paddle


def _shape_arithmetic(batch: int) -> Build:
    """shape -> slice -> concat -> reshape2, as exported models compute a target shape."""

    def build() -> tuple[list[Any], list[Any]]:
        x = paddle.static.data("x", [batch, 3, 4], "float32")
        head = paddle.shape(x)[:1]
        target = paddle.concat([head, paddle.full([1], 12, "int32")])
        return [x], [target, paddle.reshape(x, target)]

    return build


def test_shape_arithmetic_is_folded_when_the_batch_is_known() -> None:
    saved = build_and_save(_shape_arithmetic(2))
    validated = validate(saved.program, saved.params)
    target, out = saved.fetches
    assert recorded_types(saved.program)[out][1] == (-1, -1)  # Paddle: Shape is a tensor
    assert validated.types[target].value == (2, 12)
    assert validated.types[out].shape == (2, 12)
    assert dims_differences(validated, saved.program) == []


def test_shape_arithmetic_keeps_an_unknown_batch_unknown() -> None:
    saved = build_and_save(_shape_arithmetic(-1))
    validated = validate(saved.program, saved.params)
    target, out = saved.fetches
    assert validated.types[target].value is None
    assert validated.types[out].shape == (-1, -1)
    assert dims_differences(validated, saved.program) == []


def test_tensor_elements_with_known_values_are_used() -> None:
    # paddle.full makes fill_constant ops; Paddle records -1 where they feed a list slot.
    saved = build_and_save(PROGRAMS["unsqueeze_tensor_axes"][1])
    validated = validate(saved.program, saved.params)
    (out,) = saved.fetches
    assert recorded_types(saved.program)[out][1] == (-1, -1, -1, -1)
    assert validated.types[out].shape == (-1, 1, 1, 3)


def _missing_lowerings(saved: Saved) -> list[str]:
    ops = op_types(saved.program) - BOUNDARY_OPS
    return sorted(ops - EMITTERS.keys())


def _check_parity(saved: Saved, sizes: tuple[tuple[int, int], ...], **values: np.ndarray) -> None:
    """assert_parity at each (batch, dynamic) size, with `values` fed to the named int inputs."""
    missing = _missing_lowerings(saved)
    if missing:
        pytest.skip(f"needs the lowering of {missing}")
    validated = validate(saved.program, saved.params)
    if all(d >= 0 for spec in validated.inputs for d in spec.dims):
        sizes = sizes[:1]
    for i, (batch, dynamic) in enumerate(sizes):
        feeds = random_feeds(validated, batch=batch, dynamic=dynamic, seed=i) | values
        assert_parity(saved, feeds)


def test_an_empty_x_takes_a_0_as_a_size() -> None:
    # NOTE: Paddle's 0 copies X's dim, but is a size of 0 when X is empty (ONNX would copy).
    saved = build_and_save(with_ints(paddle.reshape, [-1, 3, 4], ("s", [3], "int32")))
    _check_parity(saved, ((0, 5),), s=i32(4, 0, 3))
    _check_parity(saved, ((2, 5),), s=i32(2, 0, 4))


@pytest.mark.parametrize("batch", [-1, 2])
def test_shape_arithmetic_runs_like_paddle(batch: int) -> None:
    """shape -> slice -> concat -> reshape2, folded when the batch is known, computed if not."""
    _check_parity(build_and_save(_shape_arithmetic(batch)), SIZES)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x, s: paddle.concat([x, x], axis=s),
        lambda x, s: paddle.split(x, 2, axis=s),
    ],
    ids=["concat", "split"],
)
def test_an_axis_known_only_at_run_time_is_rejected(fn: Callable[..., Any]) -> None:
    # ONNX takes the axis as an attribute: the validator rejects it before any lowering.
    saved = build_and_save(with_ints(fn, [-1, 4], S))
    with pytest.raises(ValidationFailed, match="AxisTensor: expected a constant axis"):
        validate(saved.program, saved.params)
