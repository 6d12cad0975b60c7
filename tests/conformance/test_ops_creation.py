"""fill_constant, fill_any_like, assign_value, range and shape built by real Paddle: accepted,
with the dims Paddle records, in both the 3.x and the legacy attribute spellings.

CASES, in families/creation.py, is checked by test_ops_parity.py (dims and outputs against
Paddle's)."""

from __future__ import annotations

import numpy as np
import pytest

# Imported first: paddle_util switches Paddle to legacy programs before importing it.
pytest.importorskip("tests.conformance.paddle_util")

from executor import SessionOptions, compile
from executor.errors import IncompatibleInputs
from graph_proto import framework_pb2 as pb
from tests.conformance.families.creation import BOUNDS_DTYPES, PROGRAMS, bound_feeds, one_input
from tests.conformance.paddle_util import (
    assert_parity,
    build_and_save,
    building,
    dims_differences,
    paddle,
    random_feeds,
    recorded_types,
    save,
)
from validator import validate

pytestmark = pytest.mark.paddle


def test_shape_values_flow_into_fill_constant() -> None:
    saved = build_and_save(one_input(lambda x: paddle.full(paddle.shape(x), 3.0), [2, 3, 4]))
    validated = validate(saved.program, saved.params)
    (out,) = saved.fetches
    assert recorded_types(saved.program)[out][1] == (-1, -1, -1)  # Paddle: shape from a tensor
    assert validated.types[out].shape == (2, 3, 4)


ARRAYS = {
    "float32": np.arange(12, dtype=np.float32).reshape(3, 4) / 7,
    "float64": np.array([1.5, -2.5], np.float64),
    "int32": np.array([1, -2, 2**31 - 1], np.int32),
    "int64": np.array([[1, 2], [3, 2**40]], np.int64),
    "bool": np.array([True, False, True]),
    "large": np.ones((10, 10), np.float32),
}


def _attr_names(program: bytes, op_type: str) -> set[str]:
    ops = [op for op in pb.ProgramDesc.FromString(program).blocks[0].ops if op.type == op_type]
    return {a.name for op in ops for a in op.attrs}


@pytest.mark.parametrize("legacy_format", [False, True], ids=["values", "legacy_lists"])
@pytest.mark.parametrize("array", ARRAYS.values(), ids=list(ARRAYS))
def test_assign_value_matches_paddle(array: np.ndarray, legacy_format: bool) -> None:
    with building() as (main, startup):
        x = paddle.static.data("x", [-1, *array.shape], "float32")
        out = x + paddle.cast(paddle.assign(array), "float32")
    saved = save(main, startup, [x], [out], legacy_format=legacy_format)
    names = _attr_names(saved.program, "assign_value")
    assert ("fp32_values" in names) == legacy_format and ("values" in names) != legacy_format
    validated = validate(saved.program, saved.params)
    assert dims_differences(validated, saved.program) == []
    for batch in (1, 3):
        assert_parity(saved, random_feeds(validated, batch=batch))
    (constant,) = (
        o.outputs[0].arguments[0]
        for o in pb.ProgramDesc.FromString(saved.program).blocks[0].ops
        if o.type == "assign_value"
    )
    value = validated.types[constant].value
    if array.size <= 64 and array.dtype != np.float64:  # legacy float64 is stored as float32
        assert value == tuple(array.reshape(-1).tolist())


@pytest.mark.parametrize(
    "bounds",
    [(0.0, 4.0, 0.0), (0.0, 5.0, -1.0), (5.0, 0.0, 1.0)],
    ids=["zero_step", "away_up", "away_down"],
)
@pytest.mark.parametrize("name", ["arange_fed_float", "arange_fed_int"])
def test_range_bounds_paddle_refuses_fail_the_request(
    name: str, bounds: tuple[float, float, float]
) -> None:
    # NOTE: Paddle raises for a zero step or one moving away from End; graphgate re-infers the
    # range with the request's values and refuses it before running anything.
    saved = build_and_save(PROGRAMS[name][1])
    validated = validate(saved.program, saved.params)
    model = compile(validated, SessionOptions(use_cuda=False))
    with pytest.raises(IncompatibleInputs, match=r"op \d+ \(range\)"):
        model.run(bound_feeds(BOUNDS_DTYPES[name], bounds))
