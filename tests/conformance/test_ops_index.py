"""gather, index_select, lookup_table_v2, one_hot_v2 and where built by real Paddle: accepted, with
the dims Paddle records (-1 index counts and batch dims included).

CASES, in families/index.py, is checked by test_ops_parity.py (dims and outputs against
Paddle's)."""

from __future__ import annotations

import numpy as np
import pytest

# Imported first: paddle_util switches Paddle to legacy programs before importing it.
pytest.importorskip("tests.conformance.paddle_util")

from executor import SessionOptions, compile
from executor.errors import IndexOutOfRange
from tests.conformance.families.index import I32, PROGRAMS, VT, X, embedding_build, one_hot_build
from tests.conformance.op_cases import Build, program
from tests.conformance.paddle_util import (
    Saved,
    assert_parity,
    build_and_save,
    building,
    paddle,
    random_feeds,
    recorded_types,
    run_paddle,
    save,
)
from validator import Code, ValidationFailed, validate

pytestmark = pytest.mark.paddle


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
    saved = build_and_save(one_hot_build(VT.FP32, False))
    feeds = {"x": np.array([ids], np.int64)}
    with pytest.raises(Exception, match="Illegal index value"):
        run_paddle(saved, feeds)
    bad = next(i for i in ids if not 0 <= i < 4)
    assert _refusal(saved, feeds) == f"op 1 (one_hot_v2): expected X in [0, 4), got {bad}"


def test_one_hot_allow_out_of_range_gives_zero_rows() -> None:
    saved = build_and_save(one_hot_build(VT.FP32, True))
    model = compile(validate(saved.program, saved.params), SessionOptions(use_cuda=False))
    (out,) = model.run({"x": np.array([[0, 4, -1]], np.int64)}).values()
    assert out.tolist() == [[[1, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]]


# --- indices outside what Paddle accepts: Paddle refuses them, graphgate fails the same request ---

# name: (program, feeds Paddle refuses, graphgate's message)
OUT_OF_RANGE: dict[str, tuple[Build, dict[str, np.ndarray], str]] = {
    "embedding_past_vocab": (embedding_build([-1, 7], "int64"), {"x0": np.array([[0, 1, 2, 10, 4, 5, 6]], np.int64)}, "op 1 (lookup_table_v2): expected Ids in [0, 10), got 10"),
    "embedding_minus_vocab": (embedding_build([-1, 7], "int64"), {"x0": np.array([[2, 1, 2, -10, 4, 5, 6]], np.int64)}, "op 1 (lookup_table_v2): expected Ids in [0, 10), got -10"),
    "embedding_int32_negative": (embedding_build([-1, -1, 1], "int32"), {"x0": np.array([[[3], [-4]]], np.int32)}, "op 1 (lookup_table_v2): expected Ids in [0, 10), got -4"),
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
    saved = build_and_save(embedding_build([-1, 3], "int64", padding_idx=padding_idx))
    feeds = {"x0": np.array([ids], np.int64)}
    run_paddle(saved, feeds)
    bad = next(i for i in ids if not 0 <= i < 10)
    assert _refusal(saved, feeds) == f"op 1 (lookup_table_v2): expected Ids in [0, 10), got {bad}"
