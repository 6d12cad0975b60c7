"""Reshape, transpose, squeeze, concat, split, slice, expand and tile built by real Paddle:
accepted, with the dims and dtypes Paddle records (more where shape arithmetic is folded).

This module holds the family's table, CASES, which test_ops_parity.py checks (dims and outputs
against Paddle's); test_ops_manipulation.py has the family's other tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import numpy as np

from tests.conformance.op_cases import Case, Size
from tests.conformance.paddle_util import (
    paddle,
)

Build = Callable[[], tuple[list[Any], list[Any]]]


def _program(fn: Callable[..., Any], *shapes: list[int], dtype: str = "float32") -> Build:
    """Feeds x0, x1... of `shapes` to `fn`; its result (or results) are fetched."""

    def build() -> tuple[list[Any], list[Any]]:
        xs = [paddle.static.data(f"x{i}", shape, dtype) for i, shape in enumerate(shapes)]
        out = fn(*xs)
        return xs, list(out) if isinstance(out, (tuple, list)) else [out]

    return build


def _full(value: int) -> Any:
    """A [1] int32 constant tensor (a fill_constant op) for a list argument."""
    return paddle.full([1], value, "int32")


def _batch(x: Any) -> Any:
    """paddle.shape(x)[0]: the batch size as a 0-D int32 tensor (shape -> slice)."""
    return paddle.shape(x)[0]


# name: (op type the program must contain, program)
PROGRAMS: dict[str, tuple[str, Build]] = {
    "reshape_copy_and_infer": ("reshape2", _program(lambda x: paddle.reshape(x, [0, -1]), [-1, 3, 4])),
    "reshape_infer_batch": ("reshape2", _program(lambda x: paddle.reshape(x, [-1, 12]), [-1, 3, 4])),
    "reshape_known": ("reshape2", _program(lambda x: paddle.reshape(x, [4, -1, 2]), [2, 3, 4])),
    "reshape_tensor_in_list": ("reshape2", _program(lambda x: paddle.reshape(x, [_batch(x), 12]), [-1, 3, 4])),
    "reshape_shape_tensor": ("reshape2", _program(lambda x, y: paddle.reshape(x, paddle.shape(y)), [-1, 12], [-1, 3, 4])),
    "reshape_to_0d": ("reshape2", _program(lambda x: paddle.reshape(x, []), [1, 1])),
    "transpose": ("transpose2", _program(lambda x: paddle.transpose(x, [2, 0, 1]), [-1, 3, 4])),
    "transpose_int64": ("transpose2", _program(lambda x: paddle.transpose(x, [1, 0]), [-1, 3], dtype="int64")),
    "flatten_range": ("flatten_contiguous_range", _program(lambda x: paddle.flatten(x, 1, 2), [-1, 3, 4, 5])),
    "flatten_all": ("flatten_contiguous_range", _program(paddle.flatten, [-1, 3, 4])),
    "flatten_0d": ("flatten_contiguous_range", _program(paddle.flatten, [])),
    "squeeze_axis": ("squeeze2", _program(lambda x: paddle.squeeze(x, [1]), [-1, 1, 4])),
    "squeeze_unknown_axis": ("squeeze2", _program(lambda x: paddle.squeeze(x, [0, 2]), [-1, 5, 1])),
    "squeeze_all": ("squeeze2", _program(paddle.squeeze, [-1, 1, -1, 1])),
    "unsqueeze": ("unsqueeze2", _program(lambda x: paddle.unsqueeze(x, [0, 3]), [-1, 1, 4])),
    "unsqueeze_negative": ("unsqueeze2", _program(lambda x: paddle.unsqueeze(x, -1), [-1, 3])),
    "unsqueeze_tensor_axes": ("unsqueeze2", _program(lambda x: paddle.unsqueeze(x, [_full(1), 2]), [-1, 3])),
    "concat_three_unknown": ("concat", _program(lambda x, y, z: paddle.concat([x, y, z], axis=1), [-1, 3, 4], [-1, 5, 4], [-1, -1, 4])),
    "concat_batch_axis": ("concat", _program(lambda x, y: paddle.concat([x, y]), [-1, 3], [2, 3])),
    "concat_negative_axis": ("concat", _program(lambda x, y: paddle.concat([x, y], axis=-1), [-1, 3], [-1, 5])),
    "concat_axis_tensor": ("concat", _program(lambda x, y: paddle.concat([x, y], axis=_full(1)), [-1, 3], [-1, 5])),
    "split_num": ("split", _program(lambda x: paddle.split(x, 3, axis=1), [-1, 6, 4])),
    "split_sections_infer": ("split", _program(lambda x: paddle.split(x, [1, -1, 2], axis=-2), [-1, 6, 4])),
    "split_unknown_axis": ("split", _program(lambda x: paddle.split(x, [2, -1], axis=0), [-1, 6])),
    "split_sections_tensor": ("split", _program(lambda x: paddle.split(x, [_full(2), 4], axis=1), [-1, 6])),
    "slice_ranges": ("slice", _program(lambda x: x[1:, :-1], [-1, 6, 4])),
    "slice_decrease": ("slice", _program(lambda x: x[:, 0], [-1, 6, 4])),
    "slice_decrease_last": ("slice", _program(lambda x: x[:, 2:4, -1], [-1, 6, 4])),
    "slice_to_0d": ("slice", _program(lambda x: x[0, 1], [2, 3])),
    "slice_clamped": ("slice", _program(lambda x: paddle.slice(x, [1], [-100], [100]), [-1, 6])),
    "slice_tensor_start": ("slice", _program(lambda x: paddle.slice(x, [1], [_full(2)], [5]), [-1, 6])),
    "strided_slice_negative": ("strided_slice", _program(lambda x: paddle.strided_slice(x, [1, 2], [5, 3], [0, 0], [-1, -2]), [-1, 6, 4])),
    "strided_slice_step": ("strided_slice", _program(lambda x: x[:, ::2, 1:], [-1, 6, 4])),
    "strided_slice_reverse": ("strided_slice", _program(lambda x: x[:, ::-1], [-1, 6])),
    "stack": ("stack", _program(lambda x, y: paddle.stack([x, y], axis=1), [-1, 6, 4], [-1, 6, 4])),
    "stack_three": ("stack", _program(lambda x, y, z: paddle.stack([x, y, z], axis=-1), [-1, 3], [-1, 3], [-1, 3])),
    "expand": ("expand_v2", _program(lambda x: paddle.expand(x, [-1, 3, 4]), [-1, 1, 4])),
    "expand_new_dims": ("expand_v2", _program(lambda x: paddle.expand(x, [2, -1, 3, 4]), [-1, 1, 4])),
    "expand_tensor_in_list": ("expand_v2", _program(lambda x: paddle.expand(x, [_batch(x), 3, 4]), [-1, 1, 4])),
    "tile": ("tile", _program(lambda x: paddle.tile(x, [1, 2, 3]), [-1, 1, 4])),
    "tile_more_dims": ("tile", _program(lambda x: paddle.tile(x, [2, 1, 1, 2]), [-1, 1, 4])),
    "tile_tensor_in_list": ("tile", _program(lambda x: paddle.tile(x, [_batch(x), 2, 1]), [-1, 1, 4])),
}  # fmt: skip


# --- numeric parity with Paddle's Executor ----------------------------------------------------

# (batch, dynamic) sizes for -1 dims. Where the rank of Paddle's result depends on run-time sizes
# (squeeze2 of an unknown dim), only sizes that keep the inferred rank are compared: elsewhere
# graphgate fails the request instead (see executor/lower/manipulation.py).
SIZES: Final = ((1, 5), (3, 4))
PARITY_SIZES: Final[dict[str, tuple[tuple[int, int], ...]]] = {
    "squeeze_unknown_axis": ((1, 5),),  # Paddle keeps a listed batch dim that is not 1
    "squeeze_all": ((3, 5),),  # Paddle drops every run-time 1
    "split_unknown_axis": ((3, 5), (5, 5)),  # the -1 section must not be empty
    "split_num_dynamic": ((1, 4), (3, 6)),  # num 2 must divide the dynamic dim
}


def with_ints(fn: Callable[..., Any], x: list[int], *ints: tuple[str, list[int], str]) -> Build:
    """Feeds x (float32 of shape x) and int tensors (name, shape, dtype) whose values only the
    run time knows, to `fn(x, *ints)`."""

    def build() -> tuple[list[Any], list[Any]]:
        feeds = [paddle.static.data("x", x, "float32")]
        feeds += [paddle.static.data(name, shape, dtype) for name, shape, dtype in ints]
        out = fn(*feeds)
        return feeds, list(out) if isinstance(out, (tuple, list)) else [out]

    return build


def i32(*values: int) -> np.ndarray:
    return np.array(values, np.int32)


def _i64(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


S = ("s", [1], "int32")  # one fed element of a list operand


# name: (op type, program, runs: the int feeds of each run); -1 dims take SIZES or PARITY_SIZES.
FED: dict[str, tuple[str, Build, list[dict[str, np.ndarray]]]] = {
    "reshape_fed_shape": ("reshape2", with_ints(paddle.reshape, [-1, 3, 4], ("s", [3], "int32")), [{"s": i32(0, -1, 2)}, {"s": i32(2, 0, -1)}, {"s": i32(-1, 0, 4)}]),
    "reshape_fed_list": ("reshape2", with_ints(lambda x, s: paddle.reshape(x, [s, 12]), [-1, 3, 4], S), [{"s": i32(0)}, {"s": i32(-1)}]),
    "reshape_dynamic_copy": ("reshape2", with_ints(lambda x: paddle.reshape(x, [0, 0, -1, 2]), [-1, -1, 4]), [{}]),
    "flatten_dynamic": ("flatten_contiguous_range", with_ints(lambda x: paddle.flatten(x, 0, 1), [-1, -1, 4]), [{}]),
    "transpose_dynamic": ("transpose2", with_ints(lambda x: paddle.transpose(x, [1, 2, 0]), [-1, -1, 4]), [{}]),
    "unsqueeze_fed_axes": ("unsqueeze2", with_ints(paddle.unsqueeze, [-1], ("s", [2], "int32")), [{"s": i32(-1, 0)}, {"s": i32(1, -2)}, {"s": i32(0, 0)}]),
    "split_fed_sections": ("split", with_ints(lambda x, s, t: paddle.split(x, [s, t], axis=1), [-1, 6], S, ("t", [1], "int64")), [{"s": i32(2), "t": _i64(-1)}, {"s": i32(-1), "t": _i64(4)}]),
    "split_num_dynamic": ("split", with_ints(lambda x: paddle.split(x, 2, axis=1), [-1, -1, 2]), [{}]),
    "stack_dynamic": ("stack", with_ints(lambda x: paddle.stack([x, x * 2], axis=-2), [-1, -1]), [{}]),
    "slice_fed_bounds": ("slice", with_ints(lambda x, s, e: paddle.slice(x, [1, 2], s, e), [-1, 6, 4], ("s", [2], "int64"), ("e", [2], "int64")), [{"s": _i64(-100, 1), "e": _i64(100, -1)}, {"s": _i64(4, -3), "e": _i64(2, 2**31 - 1)}]),
    "slice_dynamic": ("slice", with_ints(lambda x: x[:, 1:-1, -2:], [-1, -1, -1]), [{}]),
    "strided_slice_fed": ("strided_slice", with_ints(lambda x, s, e, t: paddle.strided_slice(x, [1, 2], s, e, t), [-1, 6, 4], ("s", [2], "int64"), ("e", [2], "int64"), ("t", [2], "int64")), [
        {"s": _i64(-10, 3), "e": _i64(0, 2**31 - 1), "t": _i64(-1, -2)},
        {"s": _i64(5, -1), "e": _i64(-(2**31), -5), "t": _i64(-2, -1)},
        {"s": _i64(-7, 0), "e": _i64(100, 3), "t": _i64(2, 1)},
    ]),
    "strided_slice_dynamic": ("strided_slice", with_ints(lambda x: paddle.strided_slice(x, [1], [-7], [-100], [-1]), [-1, -1]), [{}]),
    "strided_slice_dynamic_end": ("strided_slice", with_ints(lambda x: paddle.strided_slice(x, [0, 1], [2**31 - 1, -2], [2**31 - 1, 0], [-1, -2]), [-1, -1]), [{}]),
    "expand_fed_shape": ("expand_v2", with_ints(paddle.expand, [-1, 1, 4], ("s", [3], "int32")), [{"s": i32(-1, 3, 4)}, {"s": i32(-1, 2, -1)}]),
    "expand_dynamic": ("expand_v2", with_ints(lambda x: paddle.expand(x, [2, -1, 3, -1]), [-1, 1, -1]), [{}]),
    "tile_fed_repeats": ("tile", with_ints(paddle.tile, [-1, 4], ("s", [2], "int32")), [{"s": i32(2, 3)}, {"s": i32(1, 2)}]),
    "tile_dynamic": ("tile", with_ints(lambda x: paddle.tile(x, [2, 3]), [-1, -1, 2]), [{}]),
}  # fmt: skip


def _sizes(name: str) -> tuple[Size, ...]:
    return tuple(Size(b, d, seed) for seed, (b, d) in enumerate(PARITY_SIZES.get(name, SIZES)))


CASES: Final = {
    name: Case(op_type, build, sizes=_sizes(name)) for name, (op_type, build) in PROGRAMS.items()
} | {
    name: Case(op_type, build, sizes=_sizes(name), values=tuple(runs), dims=False)
    for name, (op_type, build, runs) in FED.items()
}
