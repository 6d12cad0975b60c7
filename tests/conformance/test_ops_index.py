"""gather, index_select, lookup_table_v2, one_hot_v2 and where built by real Paddle: accepted, with
the dims Paddle records (-1 index counts and batch dims included)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

# Imported first: paddle_util switches Paddle to legacy programs before importing it.
pytest.importorskip("tests.conformance.paddle_util")

from graph_proto import framework_pb2 as pb
from tests.conformance.paddle_util import (
    build_and_save,
    building,
    dims_differences,
    install_legacy_compat,
    paddle,
    recorded_types,
    save,
)
from validator import Code, ValidationFailed, validate

pytestmark = pytest.mark.paddle

install_legacy_compat()

F: Any = paddle.nn.functional  # its stubs reject the float scales and tensors Paddle accepts
Build = Callable[[], tuple[list[Any], list[Any]]]


def _program(fn: Callable[..., Any], *feeds: tuple[list[int], str]) -> Build:
    """`fn(*vars)` on feeds x0, x1... of (shape, dtype); returns (feeds, fetches)."""

    def build() -> tuple[list[Any], list[Any]]:
        xs = [paddle.static.data(f"x{i}", shape, dtype) for i, (shape, dtype) in enumerate(feeds)]
        out = fn(*xs)
        return xs, list(out) if isinstance(out, (tuple, list)) else [out]

    return build


def _embedding(shape: list[int], dtype: str, **kwargs: Any) -> Build:
    return _program(lambda ids: paddle.nn.Embedding(10, 4, **kwargs)(ids), (shape, dtype))


def _one_hot_depth_tensor(depth: Callable[[], Any]) -> Build:
    """one_hot_v2 with a depth_tensor, appended as Paddle 2.x's F.one_hot(x, tensor) did."""

    def build() -> tuple[list[Any], list[Any]]:
        x = paddle.static.data("x", [-1, 3], "int64")
        helper = paddle.base.layer_helper.LayerHelper("one_hot_v2")
        out = helper.create_variable_for_type_inference("float32")
        helper.append_op(
            type="one_hot_v2",
            inputs={"X": [x], "depth_tensor": [depth()]},
            outputs={"Out": [out]},
            attrs={"depth": -1, "dtype": int(paddle.base.core.VarDesc.VarType.FP32)},
        )
        return [x], [out]

    return build


X = ([-1, 5, 6], "float32")
I32 = ([3], "int32")
I64 = ([-1], "int64")

# name: (op type the program must contain, program)
PROGRAMS: dict[str, tuple[str, Build]] = {
    "gather": ("gather", _program(lambda x, i: paddle.gather(x, i), X, I64)),
    "gather_axis_1": ("gather", _program(lambda x, i: paddle.gather(x, i, axis=1), X, I32)),
    "gather_axis_negative": ("gather", _program(lambda x, i: paddle.gather(x, i, axis=-1), X, I64)),
    "gather_0d_index": ("gather", _program(lambda x, i: paddle.gather(x, i, axis=1), X, ([], "int32"))),
    "gather_2d_index": ("gather", _program(lambda x, i: paddle.gather(x, i, axis=2), X, ([-1, 1], "int64"))),
    "gather_int64_x": ("gather", _program(lambda x, i: paddle.gather(x, i), ([-1, 3], "int64"), I32)),
    "gather_axis_tensor_0": ("gather", _program(lambda x, i: paddle.gather(x, i, axis=paddle.full([1], 0, "int64")), X, I32)),
    "index_select": ("index_select", _program(lambda x, i: paddle.index_select(x, i, axis=1), X, I32)),
    "index_select_negative": ("index_select", _program(lambda x, i: paddle.index_select(x, i, axis=-1), X, I64)),
    "index_select_default": ("index_select", _program(lambda x, i: paddle.index_select(x, i), X, I64)),
    "embedding": ("lookup_table_v2", _embedding([-1, 7], "int64")),
    "embedding_padding_idx": ("lookup_table_v2", _embedding([-1, 7], "int64", padding_idx=2)),
    "embedding_negative_padding_idx": ("lookup_table_v2", _embedding([-1, -1, 1], "int32", padding_idx=-1)),
    "embedding_0d_ids": ("lookup_table_v2", _embedding([], "int64", padding_idx=0)),
    "one_hot": ("one_hot_v2", _program(lambda x: F.one_hot(x, 5), ([-1, 3], "int64"))),
    "one_hot_int32": ("one_hot_v2", _program(lambda x: F.one_hot(x, 4), ([-1, -1, 1], "int32"))),
    "one_hot_tensor_classes": ("one_hot_v2", _program(lambda x: F.one_hot(x, paddle.full([1], 6, "int32")), ([-1, 3], "int64"))),
    "one_hot_depth_tensor": ("one_hot_v2", _one_hot_depth_tensor(lambda: paddle.full([1], 6, "int32"))),
    "where": ("where", _program(paddle.where, ([-1, 3], "bool"), ([-1, 3], "int64"), ([-1, 3], "int64"))),
    "where_broadcast": ("where", _program(paddle.where, ([-1, 1, 4], "bool"), ([-1, 3, 1], "float32"), ([4], "float32"))),
    "where_scalar_y": ("where", _program(lambda c, x: paddle.where(c, x, 0.0), ([-1, 3], "bool"), ([-1, 3], "float32"))),
}  # fmt: skip


def _op_types(program: bytes) -> set[str]:
    return {op.type for op in pb.ProgramDesc.FromString(program).blocks[0].ops}


@pytest.mark.parametrize(("op_type", "build"), PROGRAMS.values(), ids=list(PROGRAMS))
def test_program_matches_paddle(op_type: str, build: Build) -> None:
    saved = build_and_save(build)
    assert op_type in _op_types(saved.program)
    validated = validate(saved.program, saved.params)
    assert dims_differences(validated, saved.program) == []


def test_constant_depth_tensor_gives_a_known_depth() -> None:
    saved = build_and_save(PROGRAMS["one_hot_depth_tensor"][1])
    validated = validate(saved.program, saved.params)
    (out,) = saved.fetches
    assert recorded_types(saved.program)[out][1] == (-1, 3, -1)  # Paddle: a tensor
    assert validated.types[out].shape == (-1, 3, 6)


def test_gather_axis_tensor_other_than_0_contradicts_paddle_and_is_refused() -> None:
    # NOTE: with an Axis tensor, GatherInferMeta records the axis-0 result ([3, 5, 6] here) while
    # the kernel gathers along the tensor's value (Paddle's Executor returns [N, 3, 6]). graphgate
    # infers [-1, 3, 6]; the core's cross-check then refuses the stored dims as contradictory.
    saved = build_and_save(
        _program(lambda x, i: paddle.gather(x, i, axis=paddle.full([1], 1, "int64")), X, I32)
    )
    (out,) = saved.fetches
    assert recorded_types(saved.program)[out][1] == (3, 5, 6)
    with pytest.raises(ValidationFailed) as info:
        validate(saved.program, saved.params)
    assert info.value.codes == ["VAR_DIMS_MISMATCH"]
    assert "expected dims [-1, 3, 6] (inferred), got [3, 5, 6] stored" in str(info.value)


def test_gather_axis_tensor_computed_at_run_time_is_refused() -> None:
    with building() as (main, startup):
        x = paddle.static.data("x", [-1, 5, 6], "float32")
        index = paddle.static.data("i", [3], "int32")
        axis = paddle.static.data("axis", [1], "int64")
        out = paddle.gather(x, index, axis=axis)
    saved = save(main, startup, [x, index, axis], [out])
    with pytest.raises(ValidationFailed) as info:
        validate(saved.program, saved.params)
    assert info.value.codes == [Code.ATTR_VALUE]
    assert "Axis: expected a tensor whose value is known before run time" in str(info.value)
