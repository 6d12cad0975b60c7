"""fill_constant, fill_any_like, assign_value, range and shape built by real Paddle: accepted,
with the dims Paddle records, in both the 3.x and the legacy attribute spellings.

CASES is checked by test_ops_parity.py (dims and outputs against Paddle's)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import numpy as np
import pytest

# Imported first: paddle_util switches Paddle to legacy programs before importing it.
pytest.importorskip("tests.conformance.paddle_util")

from executor import SessionOptions, compile
from executor.errors import IncompatibleInputs
from graph_proto import framework_pb2 as pb
from tests.conformance.op_cases import Case, Feeds, Size
from tests.conformance.paddle_util import (
    assert_parity,
    build_and_save,
    building,
    dims_differences,
    install_legacy_compat,
    paddle,
    random_feeds,
    recorded_types,
    save,
)
from validator import validate

pytestmark = pytest.mark.paddle

install_legacy_compat()

Build = Callable[[], tuple[list[Any], list[Any]]]


def _program(fn: Callable[[Any], Any], shape: list[int], dtype: str = "float32") -> Build:
    def build() -> tuple[list[Any], list[Any]]:
        x = paddle.static.data("x", shape, dtype)
        out = fn(x)
        return [x], list(out) if isinstance(out, (tuple, list)) else [out]

    return build


def _int64(x: Any) -> Any:
    return paddle.cast(x, "int64")


def _bounds(dtype: str) -> Build:
    """range with Start, End and Step fed at run time (its length is known only then)."""

    def build() -> tuple[list[Any], list[Any]]:
        bounds = [paddle.static.data(name, [1], dtype) for name in ("start", "end", "step")]
        return bounds, [paddle.arange(*bounds)]

    return build


def _as_float32(x: Any) -> Any:
    return paddle.cast(x, "float32")


# name: (op type the program must contain, program)
PROGRAMS: dict[str, tuple[str, Build]] = {
    "full": ("fill_constant", _program(lambda x: x + paddle.full([3, 4], 2.0), [-1, 3, 4])),
    "zeros_int64": ("fill_constant", _program(lambda x: _int64(x) + paddle.zeros([3, 4], "int64"), [-1, 3, 4])),
    "full_bool_0d": ("fill_constant", _program(lambda x: (paddle.cast(x, "bool"), paddle.full([], True)), [-1, 3])),
    "full_shape_tensor": ("fill_constant", _program(lambda x: paddle.full(paddle.shape(x), 3.0), [-1, 3, 4])),
    "full_shape_tensor_list": ("fill_constant", _program(lambda x: paddle.full([paddle.shape(x)[0], 5], 3.0), [-1, 3])),
    "full_value_tensor": ("fill_constant", _program(lambda x: paddle.full([2, 3], paddle.max(x)), [-1, 3])),
    "full_like": ("fill_any_like", _program(lambda x: paddle.full_like(x, 1.0), [-1, 3, 4])),
    "full_like_int64": ("fill_any_like", _program(lambda x: paddle.full_like(x, 7, dtype="int64"), [-1, -1])),
    "ones_like_bool": ("fill_any_like", _program(lambda x: paddle.ones_like(x, dtype="bool"), [-1, 2])),
    "arange_shape_bound": ("range", _program(lambda x: paddle.arange(0, paddle.shape(x)[0], 1), [-1, 3, 4])),
    "arange_known_shape_bound": ("range", _program(lambda x: _int64(x) + paddle.arange(paddle.shape(x)[1]), [2, 4])),
    "arange_constants": ("range", _program(lambda x: _int64(x) + paddle.arange(0, 10, 2), [-1, 5])),
    "arange_float": ("range", _program(lambda x: x + paddle.arange(0.0, 2.0, 0.5), [-1, 4])),
    "arange_descending": ("range", _program(lambda x: _int64(x) + paddle.arange(5, -1, -2), [-1, 3])),
    "shape": ("shape", _program(paddle.shape, [-1, 3, 4])),
    "shape_known": ("shape", _program(paddle.shape, [2, 3])),
    "shape_0d": ("shape", _program(lambda x: (x + 1.0, paddle.shape(paddle.sum(x))), [-1])),
    # Lowering variants: dtypes, values float32 cannot hold, shape and value tensors, bounds.
    "full_int64_beyond_float32": ("fill_constant", _program(lambda x: x + paddle.full([2], 2**40 + 1, "int64"), [-1, 2], "int64")),
    "full_int32_beyond_float32": ("fill_constant", _program(lambda x: x + paddle.full([1], 16777217, "int32"), [-1, 1], "int32")),
    "full_float64_str_value": ("fill_constant", _program(lambda x: x + paddle.full([3], 1.1, "float64"), [-1, 3], "float64")),
    "full_bool": ("fill_constant", _program(lambda x: (paddle.shape(x), paddle.full([2, 3], False)), [-1, 3])),
    "full_float16": ("fill_constant", _program(lambda x: (paddle.shape(x), _as_float32(paddle.full([2], 0.1, "float16"))), [-1])),
    "full_bfloat16": ("fill_constant", _program(lambda x: (paddle.shape(x), _as_float32(paddle.full([2], 1.0048828125, "bfloat16"))), [-1])),
    "full_empty": ("fill_constant", _program(lambda x: (paddle.shape(x), paddle.full([0, 3], 1.0)), [-1])),
    "full_value_tensor_int64": ("fill_constant", _program(lambda x: paddle.full([2, 3], paddle.max(x), "int64"), [-1, 3])),
    "full_shape_list_mixed": ("fill_constant", _program(lambda x: paddle.full([paddle.shape(x)[1], 2, paddle.shape(x)[0]], 1.5), [-1, -1])),
    "full_shape_tensor_int64": ("fill_constant", _program(lambda x: paddle.full(paddle.shape(x).astype("int64"), 7, "int32"), [-1, 3])),
    "full_like_float64": ("fill_any_like", _program(lambda x: paddle.full_like(x, 0.1, dtype="float64"), [-1, 3])),
    "full_like_truncates": ("fill_any_like", _program(lambda x: paddle.full_like(x, -2.7, dtype="int32"), [-1, 2])),
    "zeros_like_0d": ("fill_any_like", _program(paddle.zeros_like, [], "int64")),
    "full_like_bfloat16": ("fill_any_like", _program(lambda x: _as_float32(paddle.full_like(x, 1.0048828125, dtype="bfloat16")), [-1, 2])),
    "arange_float_accumulates": ("range", _program(lambda x: (paddle.shape(x), paddle.arange(0.1, 3.0, 0.1)), [-1])),
    "arange_float64_descending": ("range", _program(lambda x: x + paddle.arange(2.0, -1.0, -0.75, "float64"), [-1, 4], "float64")),
    "arange_fed_float": ("range", _bounds("float32")),
    "arange_fed_int": ("range", _bounds("int64")),
    "shape_bool": ("shape", _program(paddle.shape, [-1, 2, -1], "bool")),
}  # fmt: skip


def test_shape_values_flow_into_fill_constant() -> None:
    saved = build_and_save(_program(lambda x: paddle.full(paddle.shape(x), 3.0), [2, 3, 4]))
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


# Feeds for programs whose inputs are range bounds (random ones would not be valid bounds).
BOUNDS: dict[str, list[tuple[float, float, float]]] = {
    "arange_fed_float": [(0.1, 3.0, 0.1), (2.0, -1.0, -0.75), (1.0, 1.0, 0.5), (-3.0, 100.0, 0.7)],
    "arange_fed_int": [(0, 10, 3), (5, -1, -2), (2, 2, 1), (-7, 8, 4)],
}
BOUNDS_DTYPES: dict[str, type[np.generic]] = {
    "arange_fed_float": np.float32,
    "arange_fed_int": np.int64,
}


def _bound_feeds(dtype: type[np.generic], bounds: tuple[float, float, float]) -> Feeds:
    return {
        name: np.array([v], dtype) for name, v in zip(("start", "end", "step"), bounds, strict=True)
    }


CASES: Final = {
    name: Case(op_type, build, sizes=(Size(1, 4), Size(3, 4)))
    for name, (op_type, build) in PROGRAMS.items()
} | {
    name: Case(
        PROGRAMS[name][0],
        PROGRAMS[name][1],
        sizes=(Size(1, 4),),
        values=tuple(_bound_feeds(BOUNDS_DTYPES[name], b) for b in bounds),
    )
    for name, bounds in BOUNDS.items()
}


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
        model.run(_bound_feeds(BOUNDS_DTYPES[name], bounds))
