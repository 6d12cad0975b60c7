"""Activation ops built by real Paddle: the attrs it writes are accepted, graphgate's dims match.

CASES, in families/activation.py, is checked by test_ops_parity.py (dims and outputs against
Paddle's)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from graph_proto import framework_pb2 as pb
from tests.conformance.families.activation import CASES, Build, op
from tests.conformance.op_cases import randomized
from tests.conformance.paddle_util import Saved, assert_parity, build_and_save, random_feeds
from validator import Code, Policy, ValidationFailed, validate

pytestmark = pytest.mark.paddle


@pytest.mark.parametrize(
    ("build", "fragment"),
    [
        # Paddle 3 writes these but computes with the defaults; graphgate refuses the ambiguity.
        (op("hard_swish", {"threshold": 4.0}), "threshold: expected 6.0"),
        (op("softplus", {"beta": 0.0}), "beta: expected a finite non-zero number, got 0.0"),
    ],
)
def test_rejects_bad_attrs_paddle_writes(build: Build, fragment: str) -> None:
    saved = build_and_save(build)
    with pytest.raises(ValidationFailed) as info:
        validate(saved.program, saved.params)
    assert info.value.codes == [Code.ATTR_VALUE]
    assert fragment in str(info.value)


def with_dims(saved: Saved, name: str, dims: Sequence[int]) -> Saved:
    """The program with var `name` recorded as `dims` (Paddle checks some dims only at build)."""
    program = pb.ProgramDesc.FromString(saved.program)
    (var,) = [v for v in program.blocks[0].vars if v.name == name]
    var.type.dense_tensor.tensor.dims[:] = list(dims)
    return replace(saved, program=program.SerializeToString())


def test_prelu_element_with_dims_known_at_run_time_matches_paddle() -> None:
    # Paddle checks X's per-sample dims against Alpha's only when it builds the program, so an
    # exported program may lack them; the budget then needs other dims to fit Alpha [1, 3, 4].
    saved = with_dims(randomized(build_and_save(CASES["prelu/element"].build)), "x", [-1, -1, 4])
    policy = Policy(max_dynamic_dim=3)
    validated = validate(saved.program, saved.params, policy)
    assert validated.types["x"].shape == (-1, -1, 4)
    for batch in (1, 3):
        feeds = random_feeds(validated, batch=batch, dynamic=3, seed=batch)
        assert_parity(saved, feeds, validate_args=(policy,))
