"""Hostile control flow: each bad sub-block or loop is rejected with its own diagnostic code.

Programs are written with graph_proto.builder in the shape Paddle 3.3.1 exports (a while whose
body rewrites its loop vars and recomputes the condition; cond as two conditional_blocks and a
select_input), then broken one way each.
"""

from __future__ import annotations

import numpy as np
import pytest

from executor import SessionOptions, compile
from executor.errors import LoopTripLimitExceeded
from graph_proto import framework_pb2 as pb
from graph_proto.builder import Attr, ProgramBuilder
from tests.support.control_flow import (
    BAD,
    BOOL,
    FP32,
    INT64,
    STEP_SCOPES,
    Bad,
    branch,
    counting_loop,
    fill,
)
from validator import Policy, ValidationFailed, validate


def _rejected(g: ProgramBuilder, policy: Policy | None = None) -> ValidationFailed:
    with pytest.raises(ValidationFailed) as info:
        validate(g.program_bytes(), g.params_bytes(), *([policy] if policy else []))
    return info.value


def test_the_base_programs_are_valid_and_run() -> None:
    loop = validate(counting_loop().program_bytes(), counting_loop().params_bytes())
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = compile(loop, SessionOptions(use_cuda=False)).run({"x": x, "n": np.asarray(3)})
    assert int(out["i"]) == 3 and out["i"].shape == ()
    np.testing.assert_array_equal(out["x"], x * np.float32(0.125))
    cond = compile(validate(branch().program_bytes()), SessionOptions(use_cuda=False))
    np.testing.assert_array_equal(
        cond.run({"x": np.ones((2, 4), np.float32)})["out"], 2 * np.ones((2, 4))
    )
    np.testing.assert_array_equal(
        cond.run({"x": -np.ones((1, 4), np.float32)})["out"], -2 * np.ones((1, 4))
    )


@pytest.mark.parametrize("case", list(BAD.values()), ids=list(BAD))
def test_bad_control_flow_is_rejected_with_its_code(case: Bad) -> None:
    failed = _rejected(case.make(), case.policy)
    assert failed.diagnostics[0].code == case.code, failed
    assert failed.diagnostics[0].message == case.message


def test_a_loop_past_the_bound_at_run_time_is_a_typed_error() -> None:
    g = counting_loop()
    policy = Policy(max_loop_trips=4)
    model = compile(
        validate(g.program_bytes(), g.params_bytes(), policy), SessionOptions(use_cuda=False)
    )
    x = np.ones((2, 3), np.float32)
    assert int(model.run({"x": x, "n": np.asarray(4)})["i"]) == 4
    with pytest.raises(LoopTripLimitExceeded, match="expected at most 4 iterations, got more"):
        model.run({"x": x, "n": np.asarray(5)})


def test_a_policy_bound_over_the_ceiling_is_refused() -> None:
    with pytest.raises(ValueError, match=r"max_loop_trips: expected None or 0\.\.1023, got 5000"):
        Policy(max_loop_trips=5000)


def test_loop_budgets_count_the_body_times_the_bound() -> None:
    g = counting_loop()
    small = validate(g.program_bytes(), g.params_bytes(), Policy(max_loop_trips=10))
    large = validate(g.program_bytes(), g.params_bytes(), Policy(max_loop_trips=100))
    body_flops = 1 + 6 + 1  # increment, scale, less_than per iteration (an assign is free)
    assert large.report.flops_per_sample - small.report.flops_per_sample == 90 * body_flops
    tight = Policy(max_loop_trips=100, max_flops_per_sample=50 * body_flops)
    assert _rejected(g, tight).codes == ["FLOPS_TOO_LARGE"]


def _loop_halving_only_while_small(*, rank_change: bool = False) -> ProgramBuilder:
    """while i < n: i += 1; if i < 3: x = x * 0.5 (a branch rewriting a loop var in place)."""
    g = counting_loop()
    body = g.block(1)
    assign_x = body.ops[2]
    del body.ops[2]
    for name, dtype in (("three", INT64), ("small", BOOL)):
        g.var(name, dtype, [], block=1)
    g.var("branch_scope", None, vartype=STEP_SCOPES, block=1)
    fill(g, "three", INT64, 3.0, block=1)
    g.op("less_than", {"X": ["i"], "Y": ["three"]}, {"Out": ["small"]}, block=1)
    inner = g.add_block(1)
    g.op("conditional_block", {"Cond": ["small"], "Input": ["half"]},
         {"Out": ["x"], "Scope": ["branch_scope"]},
         {"sub_block": Attr(pb.BLOCK, inner), "is_scalar_condition": True}, block=1)  # fmt: skip
    if rank_change:
        g.var("flat", FP32, [6], block=inner)
        g.op("reshape2", {"X": ["half"]}, {"Out": ["flat"]}, {"shape": [6]}, block=inner)
        assign_x.inputs[0].arguments[:] = ["flat"]
    g.block(inner).ops.add().CopyFrom(assign_x)
    for _ in range(3):  # the fill, less_than and conditional_block go after the scale
        body.ops.insert(2, body.ops.pop())
    return g


@pytest.mark.parametrize(("n", "halvings"), [(0, 0), (1, 1), (5, 2)])
def test_a_branch_rewriting_a_loop_var_keeps_it_when_not_taken(n: int, halvings: int) -> None:
    g = _loop_halving_only_while_small()
    model = compile(validate(g.program_bytes(), g.params_bytes()), SessionOptions(use_cuda=False))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = model.run({"x": x, "n": np.asarray(n)})
    np.testing.assert_array_equal(out["x"], x * np.float32(0.5**halvings))


def test_a_branch_changing_the_rank_of_a_var_it_rewrites_is_rejected() -> None:
    failed = _rejected(_loop_halving_only_while_small(rank_change=True))
    assert failed.codes == ["LOOP_CARRIED_TYPE"]
    assert failed.diagnostics[0].message == (
        "branch var 'x': expected float32[2, 3] whether the branch runs or not, got float32[6] "
        "when it runs"
    )
