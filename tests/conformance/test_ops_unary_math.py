"""Unary math, pow, scale, clip, cast, assign built by real Paddle: attrs accepted, dims match."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conformance.paddle_util import build_and_save, dims_differences, paddle
from tests.conformance.test_ops_activation import Build, data, legacy, op, op_types, unary
from validator import Code, ValidationFailed, validate

pytestmark = pytest.mark.paddle


def with_scalar_inputs(op_type: str, slots: dict[str, list[int]], attrs: dict[str, Any]) -> Build:
    """X [-1, 3, -1] plus one float32 feed per scalar-tensor slot (Min, ScaleTensor...)."""

    def build() -> tuple[list[Any], list[Any]]:
        x = data([-1, 3, -1])
        extra = {slot: data(shape, name=slot.lower()) for slot, shape in slots.items()}
        inputs = {"X": [x], **{slot: [v] for slot, v in extra.items()}}
        return [x, *extra.values()], [legacy(op_type, inputs, attrs)]

    return build


def cast(dtype: Any, shape: tuple[int, ...] = (-1, 3, -1), source: str = "float32") -> Build:
    return unary(lambda x: paddle.cast(x, dtype), shape=shape, dtype=source)


# "<op type>/<variant>" -> build; the op type must appear in the saved program.
BUILDS: dict[str, Build] = {
    **{
        f"{t}/legacy": op(t)
        for t in ("exp", "log", "sqrt", "rsqrt", "abs", "floor", "ceil", "sin", "cos")
    },
    "exp/0-D": op("exp", shape=()),
    "abs/int64": op("abs", dtype="int64"),
    "floor/int32": op("floor", dtype="int32"),
    "square/functional": unary(paddle.square),
    "erf/functional": unary(paddle.erf),
    "logical_not/bool": op("logical_not", dtype="bool"),
    "logical_not/int32": unary(
        lambda x: legacy("logical_not", {"X": [x]}, dtype="bool"), dtype="int32"
    ),
    "pow/factor": unary(lambda x: paddle.pow(x, 2.0)),
    "pow/0-D": unary(lambda x: paddle.pow(x, 3.0), shape=()),
    "pow/tensor": with_scalar_inputs("pow", {"FactorTensor": [1]}, {}),
    "scale/functional": unary(lambda x: paddle.scale(x, 2.0, 1.0)),
    "scale/bias_first": unary(lambda x: paddle.scale(x, 2.0, 1.0, bias_after_scale=False)),
    "scale/operators": unary(lambda x: x * 2.0 + 1.0),
    "scale/int64": unary(lambda x: paddle.scale(x, 3.0, -1.0), dtype="int64"),
    "scale/tensors": with_scalar_inputs("scale", {"ScaleTensor": [1], "BiasTensor": []}, {}),
    "clip/both": unary(lambda x: paddle.clip(x, -1.0, 2.0)),
    "clip/max_only": unary(lambda x: paddle.clip(x, max=1.0)),
    "clip/min_only": unary(lambda x: paddle.clip(x, min=1.0), shape=()),
    "clip/int32": unary(lambda x: paddle.clip(x, 0, 2), dtype="int32"),
    "clip/tensors": with_scalar_inputs(
        "clip",
        {"Min": [1], "Max": []},
        {"min": -3.4028234663852886e38, "max": 3.4028234663852886e38},
    ),
    "cast/int64": cast("int64"),
    "cast/bool": cast("bool"),
    "cast/float16": cast("float16"),
    "cast/uint8": cast("uint8", shape=()),
    "cast/from_int32": cast("float32", source="int32"),
    "cast/bool_to_int": cast("int32", source="bool"),
    "assign/float32": unary(paddle.assign),
    "assign/int64": unary(paddle.assign, dtype="int64"),
    "assign/bool_0-D": unary(paddle.assign, shape=(), dtype="bool"),
}


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_dims_match_paddle(name: str) -> None:
    saved = build_and_save(BUILDS[name])
    assert name.split("/")[0] in op_types(saved.program)
    validated = validate(saved.program, saved.params)
    assert dims_differences(validated, saved.program) == []


@pytest.mark.parametrize(
    ("build", "code", "fragment"),
    [
        (
            op("clip", {"min": 2.0, "max": 1.0}),
            Code.ATTR_VALUE,
            "expected min <= max, got min=2.0 and max=1.0",
        ),
        (
            with_scalar_inputs("scale", {"ScaleTensor": [2]}, {}),
            Code.SHAPE_MISMATCH,
            "ScaleTensor: expected a tensor of 1 element, got dims [2]",
        ),
    ],
)
def test_rejects_bad_attrs_paddle_writes(build: Build, code: Code, fragment: str) -> None:
    saved = build_and_save(build)
    with pytest.raises(ValidationFailed) as info:
        validate(saved.program, saved.params)
    assert info.value.codes == [code]
    assert fragment in str(info.value)
