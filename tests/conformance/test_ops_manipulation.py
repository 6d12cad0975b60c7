"""Reshape, transpose, squeeze, concat, split, slice, expand and tile built by real Paddle:
accepted, with the dims and dtypes Paddle records (more where shape arithmetic is folded)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

# Imported first: paddle_util switches Paddle to legacy programs before importing it.
pytest.importorskip("tests.conformance.paddle_util")

from graph_proto import framework_pb2 as pb
from tests.conformance.paddle_util import build_and_save, dims_differences, paddle, recorded_types
from validator import validate

pytestmark = pytest.mark.paddle

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


def _op_types(program: bytes) -> set[str]:
    return {op.type for op in pb.ProgramDesc.FromString(program).blocks[0].ops}


@pytest.mark.parametrize(("op_type", "build"), PROGRAMS.values(), ids=list(PROGRAMS))
def test_program_matches_paddle(op_type: str, build: Build) -> None:
    saved = build_and_save(build)
    assert op_type in _op_types(saved.program)
    validated = validate(saved.program, saved.params)
    assert dims_differences(validated, saved.program) == []


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
