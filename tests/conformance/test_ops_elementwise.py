"""Elementwise and comparison ops built by real Paddle: accepted, same dims, same numbers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from tests.conformance.paddle_util import assert_parity, build_and_save, dims_differences, paddle
from validator import validate

pytestmark = pytest.mark.paddle

Build = Callable[[], tuple[Sequence[Any], Sequence[Any]]]


def legacy(
    op_type: str, x: Any, y: Any, attrs: dict[str, Any] | None = None, dtype: Any = None
) -> Any:
    """Appends the OpDesc as Paddle 2.x wrote it (explicit axis, for instance)."""
    helper = paddle.base.layer_helper.LayerHelper(op_type)
    out = helper.create_variable_for_type_inference(dtype if dtype is not None else x.dtype)
    helper.append_op(
        type=op_type, inputs={"X": [x], "Y": [y]}, outputs={"Out": [out]}, attrs=attrs or {}
    )
    return out


def pair(
    x_shape: list[int], y_shape: list[int], fn: Callable[[Any, Any], Any], dtype: str = "float32"
) -> Build:
    def build() -> tuple[list[Any], list[Any]]:
        x = paddle.static.data("x", x_shape, dtype)
        y = paddle.static.data("y", y_shape, dtype)
        return [x, y], [fn(x, y)]

    return build


BOOL = paddle.base.core.VarDesc.VarType.BOOL
PROGRAMS: dict[str, Build] = {
    "add_same": pair([-1, 3, 4], [-1, 3, 4], lambda x, y: x + y),
    "sub_broadcast": pair([-1, 3, 4], [4], lambda x, y: x - y),
    "mul_axis1": pair(
        [-1, 3, 4, 5], [3], lambda x, y: legacy("elementwise_mul", x, y, {"axis": 1})
    ),
    "add_axis1_rank2": pair(
        [-1, 3, 4, 5], [3, 4], lambda x, y: legacy("elementwise_add", x, y, {"axis": 1})
    ),
    "div": pair([-1, 3], [-1, 3], lambda x, y: legacy("elementwise_div", x, y)),
    "max": pair([-1, 3], [1, 3], lambda x, y: legacy("elementwise_max", x, y, {"axis": -1})),
    "min": pair([-1, 3], [3], lambda x, y: legacy("elementwise_min", x, y, {"axis": -1})),
    "greater_than": pair([-1, 3], [-1, 3], lambda x, y: x > y),
    "greater_equal": pair([-1, 3], [3], lambda x, y: x >= y),
    "less_than": pair([-1, 3], [-1, 3], lambda x, y: x < y),
    "less_equal": pair([-1, 3], [-1, 3], lambda x, y: x <= y),
    "equal_int": pair([-1, 3], [-1, 3], lambda x, y: x == y, dtype="int64"),
    "not_equal_int": pair([-1, 3], [3], lambda x, y: x != y, dtype="int64"),
    "logical_and": pair(
        [-1, 3], [-1, 3], lambda x, y: legacy("logical_and", x, y, dtype=BOOL), dtype="bool"
    ),
    "logical_or": pair(
        [-1, 3], [3], lambda x, y: legacy("logical_or", x, y, dtype=BOOL), dtype="bool"
    ),
    "add_int32": pair([-1, 2], [-1, 2], lambda x, y: x + y, dtype="int32"),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_paddle_program_is_accepted_with_the_same_dims(name: str) -> None:
    saved = build_and_save(PROGRAMS[name])
    validated = validate(saved.program, saved.params)
    assert dims_differences(validated, saved.program) == []


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_outputs_equal_paddles(name: str, batch: int) -> None:
    saved = build_and_save(PROGRAMS[name])
    validated = validate(saved.program, saved.params)
    rng = np.random.default_rng(batch)
    feeds = {}
    for spec in validated.inputs:
        shape = [batch if d < 0 else d for d in spec.dims]
        if spec.dtype.label == "bool":
            feeds[spec.name] = rng.random(shape) > 0.5
        elif spec.dtype.label.startswith("int"):
            feeds[spec.name] = rng.integers(0, 3, shape).astype(spec.dtype.numpy)
        else:
            feeds[spec.name] = rng.standard_normal(shape).astype(np.float32) + (
                3.0 if name == "div" else 0.0
            )
    assert_parity(saved, feeds)
