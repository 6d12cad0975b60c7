"""Reductions and scans built by real Paddle: accepted, with the dims and dtypes Paddle records.

CASES, in families/reduce.py, is checked by test_ops_parity.py (dims and outputs against
Paddle's)."""

from __future__ import annotations

from typing import Any

import pytest

# Imported first: paddle_util switches Paddle to legacy programs before importing it.
pytest.importorskip("tests.conformance.paddle_util")

from tests.conformance.families.reduce import PROGRAMS, unary
from tests.conformance.paddle_util import (
    assert_parity,
    build_and_save,
    dims_differences,
    paddle,
    random_feeds,
    recorded_types,
)
from validator import Code, ValidationFailed, validate

pytestmark = pytest.mark.paddle


def test_topk_k_tensor_value_gives_the_axis_length() -> None:
    saved = build_and_save(PROGRAMS["topk_k_tensor"][1])
    validated = validate(saved.program, saved.params)
    values, indices = saved.fetches
    assert recorded_types(saved.program)[values][1] == (-1, 3, -1)  # Paddle: K is a tensor
    assert validated.types[values].shape == validated.types[indices].shape == (-1, 3, 2)


def test_reduce_prod_of_shape_is_folded() -> None:
    def build() -> tuple[list[Any], list[Any]]:
        x = paddle.static.data("x", [2, 3, 4], "float32")
        return [x], [paddle.prod(paddle.shape(x))]

    saved = build_and_save(build)
    validated = validate(saved.program, saved.params)
    (out,) = saved.fetches
    assert validated.types[out].value == (24,)
    assert dims_differences(validated, saved.program) == []


def test_cumsum_flatten_with_unknown_batch() -> None:
    # NOTE: Paddle records product(dims) for a flattened cumsum even with a -1 dim: [-12] here;
    # the core treats stored intermediate dims as advisory.
    saved = build_and_save(unary(paddle.cumsum, [-1, 3, 4]))
    (out,) = saved.fetches
    assert recorded_types(saved.program)[out][1] == (-12,)
    validated = validate(saved.program, saved.params)
    assert validated.types[out].shape == (-1,)
    for batch in (1, 3):
        assert_parity(saved, random_feeds(validated, batch=batch))


def test_unsorted_top_k_is_refused() -> None:
    # NOTE: Paddle's CPU kernel leaves an unsorted result in std::nth_element's order; ONNX's
    # order is its own, so graphgate refuses rather than return the same values differently.
    def unsorted(x: Any) -> Any:
        return paddle.topk(x, 2, sorted=False)

    saved = build_and_save(unary(unsorted, [-1, 5]))
    with pytest.raises(ValidationFailed) as info:
        validate(saved.program, saved.params)
    assert info.value.codes == [Code.LOWERING_UNSUPPORTED]
    assert "sorted must be true" in str(info.value)
