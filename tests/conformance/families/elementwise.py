"""Elementwise and comparison ops built by real Paddle: accepted, same dims, same numbers.

This module holds the family's table, CASES, which test_ops_parity.py checks (dims and outputs
against Paddle's)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import numpy as np

from tests.conformance.op_cases import Case, Feeds, Size, binary, program
from tests.conformance.paddle_util import paddle


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


def _shifted(feeds: Feeds) -> Feeds:
    """Away from 0 (a divisor)."""
    return {name: value + np.float32(3.0) for name, value in feeds.items()}


def _signed_divisions(feeds: Feeds) -> Feeds:
    """Both signs on both sides, and divisors never 0 (Paddle fails on an integer 0 divisor)."""
    x, y = feeds["x"], feeds["y"]
    rng = np.random.default_rng(x.size)
    x = (rng.integers(-9, 10, x.shape) * (1.5 if x.dtype.kind == "f" else 1)).astype(x.dtype)
    y = (rng.choice([-4, -3, -2, -1, 1, 2, 3, 5], y.shape)).astype(y.dtype)
    return {"x": x, "y": y}


def floordiv_case(dtype: str, y_shape: list[int]) -> Case:
    return Case(
        "elementwise_floordiv",
        binary(paddle.floor_divide, [-1, 3, 4], y_shape, dtype),
        sizes=(Size(1, 1, 1), Size(3, 3, 3)),
        adjust=_signed_divisions,
    )


def case(
    op_type: str,
    x_shape: list[int],
    y_shape: list[int],
    fn: Callable[[Any, Any], Any],
    dtype: str = "float32",
) -> Case:
    """Every -1 dim is the batch size; integers are drawn from [0, 3)."""
    return Case(
        op_type,
        binary(fn, x_shape, y_shape, dtype),
        sizes=(Size(1, 1, 1), Size(3, 3, 3)),
        int_high=3,
        adjust=_shifted if op_type == "elementwise_div" else None,
    )


def _windows(x: Any) -> Any:
    """Swin's window reshape: the batch dim computed from the dynamic batch (B * 4 // 2); the
    run checks it was known before running, which needs the values carried at compile time."""
    batch = paddle.shape(x)[0]
    return paddle.reshape(x, [batch * 4 // 2, 2, -1])


def _pairs(x: Any) -> Any:
    """An integer elementwise_div (C++ truncation) in a reshape's shape: B * 6 / 3 rows."""
    batch = paddle.shape(x)[0]
    rows = legacy("elementwise_div", batch * 6, paddle.full([], 3, batch.dtype))
    return paddle.reshape(x, [rows, 8])


BOOL = paddle.base.core.VarDesc.VarType.BOOL
CASES: Final = {
    "add_same": case("elementwise_add", [-1, 3, 4], [-1, 3, 4], lambda x, y: x + y),
    "sub_broadcast": case("elementwise_sub", [-1, 3, 4], [4], lambda x, y: x - y),
    "mul_axis1": case(
        "elementwise_mul",
        [-1, 3, 4, 5],
        [3],
        lambda x, y: legacy("elementwise_mul", x, y, {"axis": 1}),
    ),
    "add_axis1_rank2": case(
        "elementwise_add",
        [-1, 3, 4, 5],
        [3, 4],
        lambda x, y: legacy("elementwise_add", x, y, {"axis": 1}),
    ),
    "div": case("elementwise_div", [-1, 3], [-1, 3], lambda x, y: legacy("elementwise_div", x, y)),
    "max": case(
        "elementwise_max",
        [-1, 3],
        [1, 3],
        lambda x, y: legacy("elementwise_max", x, y, {"axis": -1}),
    ),
    "min": case(
        "elementwise_min", [-1, 3], [3], lambda x, y: legacy("elementwise_min", x, y, {"axis": -1})
    ),
    "greater_than": case("greater_than", [-1, 3], [-1, 3], lambda x, y: x > y),
    "greater_equal": case("greater_equal", [-1, 3], [3], lambda x, y: x >= y),
    "less_than": case("less_than", [-1, 3], [-1, 3], lambda x, y: x < y),
    "less_equal": case("less_equal", [-1, 3], [-1, 3], lambda x, y: x <= y),
    "equal_int": case("equal", [-1, 3], [-1, 3], lambda x, y: x == y, dtype="int64"),
    "not_equal_int": case("not_equal", [-1, 3], [3], lambda x, y: x != y, dtype="int64"),
    "logical_and": case(
        "logical_and",
        [-1, 3],
        [-1, 3],
        lambda x, y: legacy("logical_and", x, y, dtype=BOOL),
        dtype="bool",
    ),
    "logical_or": case(
        "logical_or",
        [-1, 3],
        [3],
        lambda x, y: legacy("logical_or", x, y, dtype=BOOL),
        dtype="bool",
    ),
    "floordiv_float": floordiv_case("float32", [-1, 3, 4]),
    "floordiv_int64": floordiv_case("int64", [4]),
    "floordiv_int32": floordiv_case("int32", [-1, 3, 4]),
    "add_int32": case("elementwise_add", [-1, 2], [-1, 2], lambda x, y: x + y, dtype="int32"),
    "floordiv_shape_arithmetic": Case(
        "elementwise_floordiv", program(_windows, ([-1, 4, 6], "float32"))
    ),
    "div_shape_arithmetic": Case("elementwise_div", program(_pairs, ([-1, 4, 4], "float32"))),
}
