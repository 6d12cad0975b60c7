"""fill_constant, fill_any_like, assign_value, range and shape built by real Paddle: accepted,
with the dims Paddle records, in both the 3.x and the legacy attribute spellings.

This module holds the family's table, CASES, which test_ops_parity.py checks (dims and outputs
against Paddle's); test_ops_creation.py has the family's other tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import numpy as np

from tests.conformance.op_cases import Case, Feeds, Size
from tests.conformance.paddle_util import (
    install_legacy_compat,
    paddle,
)

install_legacy_compat()

Build = Callable[[], tuple[list[Any], list[Any]]]


def one_input(fn: Callable[[Any], Any], shape: list[int], dtype: str = "float32") -> Build:
    def build() -> tuple[list[Any], list[Any]]:
        x = paddle.static.data("x", shape, dtype)
        out = fn(x)
        return [x], list(out) if isinstance(out, (tuple, list)) else [out]

    return build


def _int64(x: Any) -> Any:
    return paddle.cast(x, "int64")


def _bounds(dtype: str) -> Build:
    """range with Start, End and Step fed at run time (its length is known only then)."""

    def build() -> tuple[list[Any], list[Any]]:
        bounds = [paddle.static.data(name, [1], dtype) for name in ("start", "end", "step")]
        return bounds, [paddle.arange(*bounds)]

    return build


def _as_float32(x: Any) -> Any:
    return paddle.cast(x, "float32")


# name: (op type the program must contain, program)
PROGRAMS: dict[str, tuple[str, Build]] = {
    "full": ("fill_constant", one_input(lambda x: x + paddle.full([3, 4], 2.0), [-1, 3, 4])),
    "zeros_int64": ("fill_constant", one_input(lambda x: _int64(x) + paddle.zeros([3, 4], "int64"), [-1, 3, 4])),
    "full_bool_0d": ("fill_constant", one_input(lambda x: (paddle.cast(x, "bool"), paddle.full([], True)), [-1, 3])),
    "full_shape_tensor": ("fill_constant", one_input(lambda x: paddle.full(paddle.shape(x), 3.0), [-1, 3, 4])),
    "full_shape_tensor_list": ("fill_constant", one_input(lambda x: paddle.full([paddle.shape(x)[0], 5], 3.0), [-1, 3])),
    "full_value_tensor": ("fill_constant", one_input(lambda x: paddle.full([2, 3], paddle.max(x)), [-1, 3])),
    "full_like": ("fill_any_like", one_input(lambda x: paddle.full_like(x, 1.0), [-1, 3, 4])),
    "full_like_int64": ("fill_any_like", one_input(lambda x: paddle.full_like(x, 7, dtype="int64"), [-1, -1])),
    "ones_like_bool": ("fill_any_like", one_input(lambda x: paddle.ones_like(x, dtype="bool"), [-1, 2])),
    "arange_shape_bound": ("range", one_input(lambda x: paddle.arange(0, paddle.shape(x)[0], 1), [-1, 3, 4])),
    "arange_known_shape_bound": ("range", one_input(lambda x: _int64(x) + paddle.arange(paddle.shape(x)[1]), [2, 4])),
    "arange_constants": ("range", one_input(lambda x: _int64(x) + paddle.arange(0, 10, 2), [-1, 5])),
    "arange_float": ("range", one_input(lambda x: x + paddle.arange(0.0, 2.0, 0.5), [-1, 4])),
    "arange_descending": ("range", one_input(lambda x: _int64(x) + paddle.arange(5, -1, -2), [-1, 3])),
    "shape": ("shape", one_input(paddle.shape, [-1, 3, 4])),
    "shape_known": ("shape", one_input(paddle.shape, [2, 3])),
    "shape_0d": ("shape", one_input(lambda x: (x + 1.0, paddle.shape(paddle.sum(x))), [-1])),
    # Lowering variants: dtypes, values float32 cannot hold, shape and value tensors, bounds.
    "full_int64_beyond_float32": ("fill_constant", one_input(lambda x: x + paddle.full([2], 2**40 + 1, "int64"), [-1, 2], "int64")),
    "full_int32_beyond_float32": ("fill_constant", one_input(lambda x: x + paddle.full([1], 16777217, "int32"), [-1, 1], "int32")),
    "full_float64_str_value": ("fill_constant", one_input(lambda x: x + paddle.full([3], 1.1, "float64"), [-1, 3], "float64")),
    "full_bool": ("fill_constant", one_input(lambda x: (paddle.shape(x), paddle.full([2, 3], False)), [-1, 3])),
    "full_float16": ("fill_constant", one_input(lambda x: (paddle.shape(x), _as_float32(paddle.full([2], 0.1, "float16"))), [-1])),
    "full_bfloat16": ("fill_constant", one_input(lambda x: (paddle.shape(x), _as_float32(paddle.full([2], 1.0048828125, "bfloat16"))), [-1])),
    "full_empty": ("fill_constant", one_input(lambda x: (paddle.shape(x), paddle.full([0, 3], 1.0)), [-1])),
    "full_value_tensor_int64": ("fill_constant", one_input(lambda x: paddle.full([2, 3], paddle.max(x), "int64"), [-1, 3])),
    "full_shape_list_mixed": ("fill_constant", one_input(lambda x: paddle.full([paddle.shape(x)[1], 2, paddle.shape(x)[0]], 1.5), [-1, -1])),
    "full_shape_tensor_int64": ("fill_constant", one_input(lambda x: paddle.full(paddle.shape(x).astype("int64"), 7, "int32"), [-1, 3])),
    "full_like_float64": ("fill_any_like", one_input(lambda x: paddle.full_like(x, 0.1, dtype="float64"), [-1, 3])),
    "full_like_truncates": ("fill_any_like", one_input(lambda x: paddle.full_like(x, -2.7, dtype="int32"), [-1, 2])),
    "zeros_like_0d": ("fill_any_like", one_input(paddle.zeros_like, [], "int64")),
    "full_like_bfloat16": ("fill_any_like", one_input(lambda x: _as_float32(paddle.full_like(x, 1.0048828125, dtype="bfloat16")), [-1, 2])),
    "arange_float_accumulates": ("range", one_input(lambda x: (paddle.shape(x), paddle.arange(0.1, 3.0, 0.1)), [-1])),
    "arange_float64_descending": ("range", one_input(lambda x: x + paddle.arange(2.0, -1.0, -0.75, "float64"), [-1, 4], "float64")),
    "arange_fed_float": ("range", _bounds("float32")),
    "arange_fed_int": ("range", _bounds("int64")),
    "shape_bool": ("shape", one_input(paddle.shape, [-1, 2, -1], "bool")),
}  # fmt: skip


# Feeds for programs whose inputs are range bounds (random ones would not be valid bounds).
BOUNDS: dict[str, list[tuple[float, float, float]]] = {
    "arange_fed_float": [(0.1, 3.0, 0.1), (2.0, -1.0, -0.75), (1.0, 1.0, 0.5), (-3.0, 100.0, 0.7)],
    "arange_fed_int": [(0, 10, 3), (5, -1, -2), (2, 2, 1), (-7, 8, 4)],
}
BOUNDS_DTYPES: dict[str, type[np.generic]] = {
    "arange_fed_float": np.float32,
    "arange_fed_int": np.int64,
}


def bound_feeds(dtype: type[np.generic], bounds: tuple[float, float, float]) -> Feeds:
    return {
        name: np.array([v], dtype) for name, v in zip(("start", "end", "step"), bounds, strict=True)
    }


CASES: Final = {
    name: Case(op_type, build, sizes=(Size(1, 4), Size(3, 4)))
    for name, (op_type, build) in PROGRAMS.items()
} | {
    name: Case(
        PROGRAMS[name][0],
        PROGRAMS[name][1],
        sizes=(Size(1, 4),),
        values=tuple(bound_feeds(BOUNDS_DTYPES[name], b) for b in bounds),
    )
    for name, bounds in BOUNDS.items()
}
