"""An inference-mode batch_norm inside a branch: Paddle lists its running mean and
variance in the conditional_block's Out although inference never writes them. graphgate
accepts it, with Paddle's outputs, and still refuses a branch that really writes a parameter."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from graph_proto import framework_pb2 as pb
from tests.conformance.op_cases import randomized
from tests.conformance.paddle_util import (
    Saved,
    assert_parity,
    build_and_save,
    install_legacy_compat,
    paddle,
)
from validator import Code, ValidationFailed, validate

pytestmark = pytest.mark.paddle

install_legacy_compat()


def _branch_batch_norm() -> tuple[list[Any], list[Any]]:
    x = paddle.static.data("x", [-1, 3, 4, 4], "float32")
    norm = paddle.nn.BatchNorm2D(3)
    norm.eval()
    inner = paddle.nn.BatchNorm2D(3)
    inner.eval()

    def normalized() -> Any:  # a nested cond: the statistics are listed at both levels
        return paddle.static.nn.cond(paddle.max(x) > 2.0, lambda: inner(norm(x)), lambda: norm(x))

    out = paddle.static.nn.cond(paddle.mean(x) > 0.0, normalized, lambda: x * 2.0)
    return [x], [out]


@pytest.fixture(scope="module")
def saved() -> Saved:
    return randomized(build_and_save(_branch_batch_norm))


def _statistics_in_out(program: bytes) -> set[str]:
    """Parameters the conditional_blocks list in Out."""
    desc = pb.ProgramDesc.FromString(program)
    persistable = {v.name for v in desc.blocks[0].vars if v.persistable}
    return {
        name
        for block in desc.blocks
        for op in block.ops
        if op.type == "conditional_block"
        for v in op.outputs
        if v.parameter == "Out"
        for name in v.arguments
        if name in persistable
    }


def test_paddle_lists_the_statistics_in_out(saved: Saved) -> None:
    assert len(_statistics_in_out(saved.program)) == 4  # two batch_norms: mean and variance


@pytest.mark.parametrize(
    "shift", [-3.0, 0.2, 3.0]
)  # the else branch, the inner else, the inner then
def test_branch_batch_norm_matches_paddle(saved: Saved, shift: float) -> None:
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((2, 3, 4, 4)) * 0.3 + shift).astype(np.float32)
    assert_parity(saved, {"x": x})


def test_a_branch_that_writes_a_parameter_is_still_refused(saved: Saved) -> None:
    desc = pb.ProgramDesc.FromString(saved.program)
    (param,) = sorted(_statistics_in_out(saved.program))[:1]
    # The batch_norm's Y goes to the running mean instead: a real write of a parameter.
    for block in desc.blocks[1:]:
        for op in block.ops:
            if op.type == "batch_norm" and param in [a for v in op.inputs for a in v.arguments]:
                (y,) = [v for v in op.outputs if v.parameter == "Y"]
                y.arguments[0] = param
    with pytest.raises(ValidationFailed) as info:
        validate(desc.SerializeToString(), saved.params)
    # The outer conditional_block lists it in Out, and now a block inside it really writes it.
    refusals = [(d.code, d.var) for d in info.value.diagnostics]
    assert (Code.VAR_WRITES_PARAM, param) in refusals, refusals
