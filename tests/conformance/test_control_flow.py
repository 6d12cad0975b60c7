"""Control flow against real Paddle: paddle.static.nn.cond (conditional_block + select_input ->
ONNX If) and paddle.static.nn.while_loop (while -> ONNX Loop), with shapes known only at run time.

Every case runs the same saved program in Paddle's Executor and in graphgate and compares the
fetches (float32 rtol 1e-4 atol 1e-5, integers exactly, same shapes: 0-D stays 0-D).
"""

from __future__ import annotations

import numpy as np
import pytest

from executor import SessionOptions, compile
from executor.errors import LoopTripLimitExceeded
from tests.conformance.control_flow import (
    cond_on_zero_d_values,
    cond_returning_several_values,
    cond_with_different_shapes,
    nested_cond,
    nested_while,
    while_counting_to_n,
    while_growing_a_tensor,
    while_until_values_converge,
    while_with_cond_in_body,
)
from tests.conformance.paddle_util import (
    Saved,
    assert_parity,
    build_and_save,
    op_types,
    run_paddle,
)
from validator import Policy, validate

pytestmark = pytest.mark.paddle


@pytest.fixture(scope="module")
def cond_shapes() -> Saved:
    return build_and_save(cond_with_different_shapes)


def test_cond_exports_conditional_blocks_and_select_input(cond_shapes: Saved) -> None:
    assert {"conditional_block", "select_input", "logical_not", "cast"} <= op_types(
        cond_shapes.program
    )


def test_cond_output_dims_where_branches_differ_are_unknown_at_compile_time(
    cond_shapes: Saved,
) -> None:
    validated = validate(cond_shapes.program, cond_shapes.params)
    assert [list(spec.dims) for spec in validated.outputs] == [[-1, -1], [-1, -1]]


@pytest.mark.parametrize(
    ("sign", "rows", "cols"), [(1.0, 6, 4), (-1.0, 3, 2)], ids=["true", "false"]
)
def test_cond_with_branches_of_different_shapes_taken_both_ways(
    cond_shapes: Saved, sign: float, rows: int, cols: int
) -> None:
    rng = np.random.default_rng(1)
    x = (np.abs(rng.standard_normal((3, 4))) * sign).astype(np.float32)
    ours = assert_parity(cond_shapes, {"x": x})
    assert [o.shape for o in ours.values()] == [(rows, cols), (rows, cols)]


@pytest.mark.parametrize("a", [2.5, 0.5, -1.5], ids=["true-true", "true-false", "false"])
def test_nested_cond(a: float) -> None:
    saved = build_and_save(nested_cond)
    x = np.random.default_rng(2).standard_normal((2, 3)).astype(np.float32)
    assert_parity(saved, {"x": x, "a": np.asarray(a, np.float32)})


@pytest.mark.parametrize("k", [5, 1])
def test_zero_d_feeds_branch_values_and_fetches_stay_zero_d(k: int) -> None:
    saved = build_and_save(cond_on_zero_d_values)
    x = np.random.default_rng(3).standard_normal((4, 3)).astype(np.float32)
    ours = assert_parity(saved, {"x": x, "k": np.asarray(k, np.int64)})
    assert [o.shape for o in ours.values()] == [(), ()]


@pytest.fixture(scope="module")
def counting() -> Saved:
    return build_and_save(while_counting_to_n)


@pytest.mark.parametrize("n", [0, 1, 7], ids=["zero-trips", "one-trip", "seven-trips"])
def test_while_loop_trip_count_from_the_data(counting: Saved, n: int) -> None:
    assert "while" in op_types(counting.program)
    x = np.random.default_rng(4).standard_normal((2, 3)).astype(np.float32)
    ours = assert_parity(counting, {"x": x, "n": np.asarray(n, np.int64)})
    assert ours["fill_constant_1.tmp_0"].shape == ()  # the 0-D loop counter stays 0-D
    assert int(ours["fill_constant_1.tmp_0"]) == n


def test_while_loop_up_to_the_policy_bound_runs(counting: Saved) -> None:
    x = np.ones((1, 3), np.float32)
    assert_parity(
        counting, {"x": x, "n": np.asarray(6, np.int64)}, validate_args=(Policy(max_loop_trips=6),)
    )


def test_while_loop_past_the_policy_bound_is_a_typed_error(counting: Saved) -> None:
    validated = validate(counting.program, counting.params, Policy(max_loop_trips=6))
    model = compile(validated, SessionOptions(use_cuda=False))
    feeds = {"x": np.ones((1, 3), np.float32), "n": np.asarray(7, np.int64)}
    assert len(run_paddle(counting, feeds)) == 2  # Paddle itself runs it: the cap is ours
    with pytest.raises(LoopTripLimitExceeded) as info:
        model.run(feeds)
    assert str(info.value) == (
        "a while loop ran past the policy's trip bound: expected at most 6 iterations, got more"
    )
    assert info.value.code == "LOOP_TRIP_LIMIT"


@pytest.mark.parametrize("scale", [0.001, 1.0, 300.0], ids=["zero-trips", "few", "many"])
def test_while_loop_trip_count_from_the_values(scale: float) -> None:
    saved = build_and_save(while_until_values_converge)
    x = (np.random.default_rng(5).standard_normal((3, 2)) * scale).astype(np.float32)
    assert_parity(saved, {"x": x})


@pytest.mark.parametrize("n", [0, 3, 9])
def test_while_loop_with_a_cond_in_its_body(n: int) -> None:
    saved = build_and_save(while_with_cond_in_body)
    x = np.random.default_rng(6).random((2, 3)).astype(np.float32)
    assert_parity(saved, {"x": x, "n": np.asarray([n], np.int64)})


@pytest.mark.parametrize("n", [0, 4])  # the inner loop runs 0, 2, 4 and 6 times
def test_nested_while_loops(n: int) -> None:
    saved = build_and_save(nested_while)
    x = np.random.default_rng(7).standard_normal((2, 2)).astype(np.float32)
    assert_parity(saved, {"x": x, "n": np.asarray(n, np.int64)})


def test_an_inner_loop_past_the_bound_is_a_typed_error() -> None:
    saved = build_and_save(nested_while)
    policy = Policy(max_loop_trips=5)
    model = compile(validate(saved.program, saved.params, policy), SessionOptions(use_cuda=False))
    x = np.zeros((1, 2), np.float32)
    assert_parity(saved, {"x": x, "n": np.asarray(3, np.int64)}, validate_args=(policy,))
    # n = 4: the outer loop runs 4 times (within 5), its last inner loop 6 times (past 5).
    with pytest.raises(LoopTripLimitExceeded, match="expected at most 5 iterations, got more"):
        model.run({"x": x, "n": np.asarray(4, np.int64)})


@pytest.mark.parametrize("n", [0, 3])
def test_while_loop_var_with_dims_known_only_at_run_time(n: int) -> None:
    saved = build_and_save(while_growing_a_tensor)
    validated = validate(saved.program, saved.params)
    assert [list(spec.dims) for spec in validated.outputs] == [[-1, 2], [2]]
    x = np.random.default_rng(8).standard_normal((2, 2)).astype(np.float32)
    ours = assert_parity(saved, {"x": x, "n": np.asarray(n, np.int64)})
    assert ours["x"].shape == (2 + n, 2)


@pytest.mark.parametrize("ids", [[3, 4], [0, 1]], ids=["true", "false"])
def test_cond_returning_values_of_several_dtypes(ids: list[int]) -> None:
    saved = build_and_save(cond_returning_several_values)
    x = np.random.default_rng(9).standard_normal((2, 3)).astype(np.float32)
    assert_parity(saved, {"x": x, "ids": np.asarray(ids, np.int64)})
