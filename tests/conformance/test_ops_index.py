"""gather, index_select, lookup_table_v2, one_hot_v2 and where built by real Paddle: accepted, with
the dims Paddle records (-1 index counts and batch dims included).

CASES is checked by test_ops_parity.py (dims and outputs against Paddle's)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, Literal

import numpy as np
import pytest

# Imported first: paddle_util switches Paddle to legacy programs before importing it.
pytest.importorskip("tests.conformance.paddle_util")

from executor import SessionOptions, compile
from executor.errors import IndexOutOfRange
from tests.conformance.op_cases import Build, Case, Size, program
from tests.conformance.paddle_util import (
    Saved,
    assert_parity,
    build_and_save,
    building,
    install_legacy_compat,
    paddle,
    random_feeds,
    recorded_types,
    run_paddle,
    save,
)
from validator import Code, ValidationFailed, validate

pytestmark = pytest.mark.paddle

install_legacy_compat()

F: Any = paddle.nn.functional  # its stubs reject the float scales and tensors Paddle accepts


def _embedding(shape: list[int], dtype: str, **kwargs: Any) -> Build:
    return program(lambda ids: paddle.nn.Embedding(10, 4, **kwargs)(ids), (shape, dtype))


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
    "gather": ("gather", program(lambda x, i: paddle.gather(x, i), X, I64)),
    "gather_axis_1": ("gather", program(lambda x, i: paddle.gather(x, i, axis=1), X, I32)),
    "gather_axis_negative": ("gather", program(lambda x, i: paddle.gather(x, i, axis=-1), X, I64)),
    "gather_0d_index": ("gather", program(lambda x, i: paddle.gather(x, i, axis=1), X, ([], "int32"))),
    "gather_2d_index": ("gather", program(lambda x, i: paddle.gather(x, i, axis=2), X, ([-1, 1], "int64"))),
    "gather_int64_x": ("gather", program(lambda x, i: paddle.gather(x, i), ([-1, 3], "int64"), I32)),
    "gather_axis_tensor_0": ("gather", program(lambda x, i: paddle.gather(x, i, axis=paddle.full([1], 0, "int64")), X, I32)),
    "index_select": ("index_select", program(lambda x, i: paddle.index_select(x, i, axis=1), X, I32)),
    "index_select_negative": ("index_select", program(lambda x, i: paddle.index_select(x, i, axis=-1), X, I64)),
    "index_select_default": ("index_select", program(lambda x, i: paddle.index_select(x, i), X, I64)),
    "embedding": ("lookup_table_v2", _embedding([-1, 7], "int64")),
    "embedding_padding_idx": ("lookup_table_v2", _embedding([-1, 7], "int64", padding_idx=2)),
    "embedding_negative_padding_idx": ("lookup_table_v2", _embedding([-1, -1, 1], "int32", padding_idx=-1)),
    "embedding_0d_ids": ("lookup_table_v2", _embedding([], "int64", padding_idx=0)),
    "one_hot": ("one_hot_v2", program(lambda x: F.one_hot(x, 5), ([-1, 3], "int64"))),
    "one_hot_int32": ("one_hot_v2", program(lambda x: F.one_hot(x, 4), ([-1, -1, 1], "int32"))),
    "one_hot_tensor_classes": ("one_hot_v2", program(lambda x: F.one_hot(x, paddle.full([1], 6, "int32")), ([-1, 3], "int64"))),
    "one_hot_depth_tensor": ("one_hot_v2", _one_hot_depth_tensor(lambda: paddle.full([1], 6, "int32"))),
    "where": ("where", program(paddle.where, ([-1, 3], "bool"), ([-1, 3], "int64"), ([-1, 3], "int64"))),
    "where_broadcast": ("where", program(paddle.where, ([-1, 1, 4], "bool"), ([-1, 3, 1], "float32"), ([4], "float32"))),
    "where_scalar_y": ("where", program(lambda c, x: paddle.where(c, x, 0.0), ([-1, 3], "bool"), ([-1, 3], "float32"))),
}  # fmt: skip


def test_constant_depth_tensor_gives_a_known_depth() -> None:
    saved = build_and_save(PROGRAMS["one_hot_depth_tensor"][1])
    validated = validate(saved.program, saved.params)
    (out,) = saved.fetches
    assert recorded_types(saved.program)[out][1] == (-1, 3, -1)  # Paddle: a tensor
    assert validated.types[out].shape == (-1, 3, 6)


@pytest.mark.parametrize("batch", [1, 3])
def test_gather_axis_tensor_other_than_0_contradicts_paddle_and_warns(batch: int) -> None:
    # NOTE: with an Axis tensor, GatherInferMeta records the axis-0 result ([3, 5, 6] here) while
    # the kernel gathers along the tensor's value (Paddle's Executor returns [N, 3, 6]). graphgate
    # infers [-1, 3, 6] and warns that the stored dims contradict it; what runs matches Paddle.
    saved = build_and_save(
        program(lambda x, i: paddle.gather(x, i, axis=paddle.full([1], 1, "int64")), X, I32)
    )
    (out,) = saved.fetches
    assert recorded_types(saved.program)[out][1] == (3, 5, 6)
    validated = validate(saved.program, saved.params)
    assert validated.types[out].shape == (-1, 3, 6)
    warnings = [(w.code, w.message) for w in validated.report.warnings]
    assert warnings == [
        (Code.VAR_DIMS_MISMATCH, "expected dims [-1, 3, 6] (inferred), got [3, 5, 6] stored")
    ]
    assert_parity(saved, random_feeds(validated, batch=batch, int_high=5))


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


# --- numeric parity: graphgate's lowering against Paddle's Executor ---------------------------


def _one_hot(dtype: Any, allow_out_of_range: bool) -> Build:
    """one_hot_v2 with a dtype attr and allow_out_of_range, as Paddle 2.x programs carry them."""

    def build() -> tuple[list[Any], list[Any]]:
        x = paddle.static.data("x", [-1, 3], "int64")
        helper = paddle.base.layer_helper.LayerHelper("one_hot_v2")
        out = helper.create_variable_for_type_inference(dtype)
        helper.append_op(
            type="one_hot_v2",
            inputs={"X": [x]},
            outputs={"Out": [out]},
            attrs={"depth": 4, "dtype": int(dtype), "allow_out_of_range": allow_out_of_range},
        )
        return [x], [out]

    return build


_VT: Any = paddle.base.core.VarDesc.VarType
PARITY_PROGRAMS: dict[str, tuple[str, Build]] = {
    **PROGRAMS,
    "gather_negative_index": ("gather", program(lambda x, i: paddle.gather(x, i, axis=2), X, I64)),
    "index_select_negative_index": ("index_select", program(lambda x, i: paddle.index_select(x, i, axis=1), X, I64)),
    "embedding_float64": ("lookup_table_v2", program(lambda ids: F.embedding(ids, paddle.static.create_parameter([10, 4], "float64"), padding_idx=-2), ([-1, 5], "int64"))),
    "one_hot_int64_dtype": ("one_hot_v2", _one_hot(_VT.INT64, False)),
    "one_hot_bool_allow_out_of_range": ("one_hot_v2", _one_hot(_VT.BOOL, True)),
    "where_float64": ("where", program(paddle.where, ([-1, 2, 3], "bool"), ([-1, 2, 3], "float64"), ([-1, 2, 3], "float64"))),
}  # fmt: skip

# The largest valid index (exclusive) of each program's integer feeds; "batch" (BATCH) for axis 0.
_INT_HIGH: dict[str, int | Literal["batch"]] = {
    "gather": "batch", "gather_int64_x": "batch", "gather_axis_tensor_0": "batch",
    "gather_axis_1": 5, "gather_0d_index": 5, "gather_axis_negative": 6, "gather_2d_index": 6,
    "index_select": 5, "index_select_negative": 6, "index_select_default": "batch",
    "one_hot": 5, "one_hot_int32": 4, "one_hot_tensor_classes": 6, "one_hot_depth_tensor": 6,
    "one_hot_int64_dtype": 4, "one_hot_bool_allow_out_of_range": 4,
}  # fmt: skip
# Feeds set outright: negative indices (they wrap around in Paddle 3 as in ONNX Gather) and
# padding ids (padding_idx=-2 is written as 8).
_FEED_VALUES: dict[str, dict[str, np.ndarray]] = {
    "gather_negative_index": {"x1": np.array([-1, 0, -6, 5, -3], np.int64)},
    "index_select_negative_index": {"x1": np.array([-5, 4, -1], np.int64)},
    "embedding_float64": {"x0": np.array([[8, 1, 8, 0, 9], [3, 8, 2, 2, 7]], np.int64)},
}


CASES: Final = {
    name: Case(
        op_type,
        build,
        sizes=(Size(1, 5), Size(3, 5)),
        int_high=_INT_HIGH.get(name, 10),  # 10: the embeddings' vocabulary
        values=(_FEED_VALUES.get(name, {}),),
        dims=name in PROGRAMS,
    )
    for name, (op_type, build) in PARITY_PROGRAMS.items()
}


def _refusal(saved: Saved, feeds: dict[str, np.ndarray]) -> str:
    """The message of the IndexOutOfRange graphgate's run of `saved` on `feeds` fails with."""
    model = compile(validate(saved.program, saved.params), SessionOptions(use_cuda=False))
    with pytest.raises(IndexOutOfRange) as info:
        model.run(feeds)
    return str(info.value)


@pytest.mark.parametrize("ids", [[0, 3, 4], [0, -1, 2]], ids=["past_depth", "negative"])
def test_one_hot_out_of_range_fails_as_in_paddle(ids: list[int]) -> None:
    # NOTE: Paddle 3.3 refuses out-of-range ids even with allow_out_of_range (its kernel no
    # longer reads the attr); graphgate gives the zero rows the attr documents there.
    saved = build_and_save(_one_hot(_VT.FP32, False))
    feeds = {"x": np.array([ids], np.int64)}
    with pytest.raises(Exception, match="Illegal index value"):
        run_paddle(saved, feeds)
    bad = next(i for i in ids if not 0 <= i < 4)
    assert _refusal(saved, feeds) == f"op 1 (one_hot_v2): expected X in [0, 4), got {bad}"


def test_one_hot_allow_out_of_range_gives_zero_rows() -> None:
    saved = build_and_save(_one_hot(_VT.FP32, True))
    model = compile(validate(saved.program, saved.params), SessionOptions(use_cuda=False))
    (out,) = model.run({"x": np.array([[0, 4, -1]], np.int64)}).values()
    assert out.tolist() == [[[1, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]]


# --- indices outside what Paddle accepts: Paddle refuses them, graphgate fails the same request ---

# name: (program, feeds Paddle refuses, graphgate's message)
OUT_OF_RANGE: dict[str, tuple[Build, dict[str, np.ndarray], str]] = {
    "embedding_past_vocab": (_embedding([-1, 7], "int64"), {"x0": np.array([[0, 1, 2, 10, 4, 5, 6]], np.int64)}, "op 1 (lookup_table_v2): expected Ids in [0, 10), got 10"),
    "embedding_minus_vocab": (_embedding([-1, 7], "int64"), {"x0": np.array([[2, 1, 2, -10, 4, 5, 6]], np.int64)}, "op 1 (lookup_table_v2): expected Ids in [0, 10), got -10"),
    "embedding_int32_negative": (_embedding([-1, -1, 1], "int32"), {"x0": np.array([[[3], [-4]]], np.int32)}, "op 1 (lookup_table_v2): expected Ids in [0, 10), got -4"),
    "gather_below_minus_size": (PROGRAMS["gather_axis_negative"][1], {"x0": np.ones((2, 5, 6), np.float32), "x1": np.array([0, -7], np.int64)}, "op 2 (gather): expected Index in [-6, 6), got -7"),
    "gather_past_size": (PROGRAMS["gather_axis_1"][1], {"x0": np.ones((2, 5, 6), np.float32), "x1": np.array([0, 5, 1], np.int32)}, "op 2 (gather): expected Index in [-5, 5), got 5"),
    "index_select_below_minus_size": (PROGRAMS["index_select"][1], {"x0": np.ones((2, 5, 6), np.float32), "x1": np.array([0, -6, 1], np.int32)}, "op 2 (index_select): expected Index in [-5, 5), got -6"),
}  # fmt: skip


@pytest.mark.parametrize(
    ("build", "feeds", "message"), OUT_OF_RANGE.values(), ids=list(OUT_OF_RANGE)
)
def test_an_index_paddle_refuses_fails_the_request(
    build: Build, feeds: dict[str, np.ndarray], message: str
) -> None:
    saved = build_and_save(build)
    with pytest.raises((ValueError, IndexError), match=r"expected|must be"):
        run_paddle(saved, feeds)
    assert _refusal(saved, feeds) == message


@pytest.mark.parametrize(
    ("padding_idx", "ids"),
    [(None, [0, -1, 2]), (2, [0, -1, 2]), (2, [2, -10, 4]), (9, [0, -3, 2]), (2, [2, 11, 4])],
    ids=[
        "no_padding_minus_1",
        "padding_minus_1",
        "padding_minus_vocab",
        "padding_minus_3",
        "padding_past_vocab",
    ],
)
def test_an_embedding_id_out_of_range_fails_where_paddle_reads_out_of_bounds(
    padding_idx: int | None, ids: list[int]
) -> None:
    # NOTE: Paddle 3.3's CPU kernel lets these through its range check (-1 always, any id once
    # padding_idx is set) and reads memory outside W: undefined values, no error. graphgate
    # refuses them, as Paddle does for the other ids outside [0, vocab) without padding_idx.
    saved = build_and_save(_embedding([-1, 3], "int64", padding_idx=padding_idx))
    feeds = {"x0": np.array([ids], np.int64)}
    run_paddle(saved, feeds)
    bad = next(i for i in ids if not 0 <= i < 10)
    assert _refusal(saved, feeds) == f"op 1 (lookup_table_v2): expected Ids in [0, 10), got {bad}"
