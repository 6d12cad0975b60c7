"""A structure cap does not hide the program's other problems: over max_blocks, validation goes
on (its work stays bounded by the op and var caps) and reports everything at once."""

from __future__ import annotations

import pytest

from graph_proto.types import DType
from tests.support.control_flow import branch
from validator import Code, Policy, ValidationFailed, validate

TWO_BLOCKS = Policy(max_blocks=2)  # branch() has three: block 0 and one per branch


def _codes(program: bytes, params: bytes | None, policy: Policy) -> list[Code]:
    with pytest.raises(ValidationFailed) as info:
        validate(program, params, policy)
    return [d.code for d in info.value.diagnostics]


def test_a_valid_program_over_the_block_cap_gets_only_the_cap() -> None:
    g = branch()
    validate(g.program_bytes(), g.params_bytes())  # valid under the default cap
    assert _codes(g.program_bytes(), g.params_bytes(), TWO_BLOCKS) == [Code.PROGRAM_TOO_COMPLEX]


def test_over_the_block_cap_the_other_problems_are_reported_too() -> None:
    g = branch()
    g.var("ghost_out", DType.FP32, [-1, 4])
    g.op("relu", {"X": ["ghost"]}, {"Out": ["ghost_out"]})  # reads a var nothing defines
    g.var("bad", DType.FP32, [-1, 4], block=1)
    g.op("softmax", {"X": ["x"]}, {"Out": ["bad"]}, {"axis": 7}, block=1)  # axis out of range
    codes = _codes(g.program_bytes(), g.params_bytes(), TWO_BLOCKS)
    assert Code.PROGRAM_TOO_COMPLEX in codes
    assert Code.VAR_UNDEFINED in codes
    assert Code.AXIS_INVALID in codes
    # The same problems, and only the cap more, than under a cap the program keeps.
    within = _codes(g.program_bytes(), g.params_bytes(), Policy())
    assert sorted(codes) == sorted([Code.PROGRAM_TOO_COMPLEX, *within])
