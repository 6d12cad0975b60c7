"""Unary math, pow, scale, clip, cast, assign built by real Paddle: attrs accepted, dims match.

This module holds the family's table, CASES, which test_ops_parity.py checks (dims and outputs
against Paddle's); test_ops_unary_math.py has the family's other tests."""

from __future__ import annotations

from typing import Any, Final

import numpy as np

from tests.conformance.families.activation import (
    Build,
    bfloat16,
    data,
    legacy,
    op,
    unary,
)
from tests.conformance.op_cases import TOLERANCE, Adjust, Case
from tests.conformance.paddle_util import paddle


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


def legacy_cast(out: str, source: str) -> Build:
    """A cast OpDesc from `source` to `out` (paddle.cast writes the same, for these dtypes)."""
    vartype = paddle.base.core.VarDesc.VarType
    code = {"int8": vartype.INT8, "int16": vartype.INT16, "uint8": vartype.UINT8}[out]
    attrs = {
        "in_dtype": {"float32": vartype.FP32, "float64": vartype.FP64}[source],
        "out_dtype": code,
    }
    return unary(lambda x: legacy("cast", {"X": [x]}, attrs, dtype=code), dtype=source)


FLT_MAX: Final = 3.4028234663852886e38


# "<op type>/<variant>" -> build; the op type must appear in the saved program.
BUILDS: dict[str, Build] = {
    **{
        f"{t}/legacy": op(t)
        for t in ("exp", "log", "sqrt", "rsqrt", "abs", "floor", "ceil", "sin", "cos")
    },
    "exp/0-D": op("exp", shape=()),
    "exp/float64": op("exp", dtype="float64"),
    "exp/float16": op("exp", dtype="float16"),
    "exp/bfloat16": bfloat16("exp"),
    "erf/float16": op("erf", dtype="float16"),
    "floor/float16": op("floor", dtype="float16"),
    "floor/bfloat16": bfloat16("floor"),
    "abs/bfloat16": bfloat16("abs"),
    "sin/float64": op("sin", dtype="float64"),
    "ceil/int64": op("ceil", dtype="int64"),
    "square/int32": unary(paddle.square, dtype="int32"),
    "erf/float64": unary(paddle.erf, dtype="float64"),
    "logical_not/float32": unary(
        lambda x: legacy("logical_not", {"X": [x]}, dtype="bool"), dtype="float32"
    ),
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
    "pow/int_fraction": op("pow", {"factor": 2.5}, dtype="int64"),  # Paddle computes x ** 2
    "pow/int_overflow": op("pow", {"factor": 41.0}, dtype="int64"),  # wraps, exactly
    "pow/float64": op("pow", {"factor": 1 / 3}, dtype="float64"),
    "scale/functional": unary(lambda x: paddle.scale(x, 2.0, 1.0)),
    "scale/bias_first": unary(lambda x: paddle.scale(x, 2.0, 1.0, bias_after_scale=False)),
    "scale/operators": unary(lambda x: x * 2.0 + 1.0),
    "scale/int64": unary(lambda x: paddle.scale(x, 3.0, -1.0), dtype="int64"),
    "scale/tensors": with_scalar_inputs("scale", {"ScaleTensor": [1], "BiasTensor": []}, {}),
    "scale/int_fraction": op("scale", {"scale": -2.5, "bias": 1.7}, dtype="int32"),
    "scale/uint8_negative": op("scale", {"scale": -1.0, "bias": 255.0}, dtype="uint8"),
    "scale/float16": op("scale", {"scale": 0.3, "bias": 0.7}, dtype="float16"),
    "scale/bfloat16": bfloat16("scale", {"scale": 0.3, "bias": 0.7}),
    "scale/float64": op(
        "scale", {"scale": 0.1, "bias": -0.3, "bias_after_scale": False}, dtype="float64"
    ),
    "clip/both": unary(lambda x: paddle.clip(x, -1.0, 2.0)),
    "clip/max_only": unary(lambda x: paddle.clip(x, max=1.0)),
    "clip/min_only": unary(lambda x: paddle.clip(x, min=1.0), shape=()),
    "clip/int32": unary(lambda x: paddle.clip(x, 0, 2), dtype="int32"),
    "clip/int32_open_min": op("clip", {"min": -FLT_MAX, "max": 2.5}, dtype="int32"),
    "clip/int64_max_only": unary(lambda x: paddle.clip(x, max=1), dtype="int64"),
    "clip/float64": unary(lambda x: paddle.clip(x, -0.3, 0.7), dtype="float64"),
    "clip/bfloat16": bfloat16("clip", {"min": -0.3, "max": 0.9}),
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
    "cast/float64_to_int32": cast("int32", source="float64"),
    "cast/to_int8": legacy_cast("int8", "float32"),
    "cast/to_int16": legacy_cast("int16", "float64"),
    "cast/int64_to_float16": cast("float16", source="int64"),
    "cast/float64_to_float32": cast("float32", source="float64"),
    "assign/float32": unary(paddle.assign),
    "assign/int64": unary(paddle.assign, dtype="int64"),
    "assign/bool_0-D": unary(paddle.assign, shape=(), dtype="bool"),
}


def _positive(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {"x": np.abs(feeds["x"]) + 0.1}


def _wide(scale: float) -> Adjust:
    return lambda feeds: {"x": (feeds["x"] * scale).astype(feeds["x"].dtype)}


# Feeds Paddle's kernels need beyond random_feeds, by build name.
FEEDS: Final[dict[str, Adjust]] = {
    "log/legacy": _positive,
    "sqrt/legacy": _positive,
    "rsqrt/legacy": _positive,
    "pow/float64": _positive,
    "pow/tensor": lambda f: {**_positive(f), "factortensor": np.array([1.7], np.float32)},
    "pow/int_overflow": lambda f: {"x": f["x"] + 2},  # [2, 6)
    "erf/float64": _wide(3),
    "clip/tensors": lambda f: {
        "min": np.array([-0.5], np.float32),
        "max": np.array(0.5, np.float32),
    },
    "scale/int_fraction": lambda f: {"x": f["x"] - 2},
    "scale/uint8_negative": lambda f: {"x": f["x"] * 60},
    "cast/float64_to_int32": _wide(4),
    "cast/to_int8": _wide(200),  # wraps past 127, through int32
    "cast/to_int16": _wide(5e4),
    "logical_not/float32": lambda f: {"x": np.where(f["x"] > 0.5, 0, f["x"]).astype(np.float32)},
}


# NOTE: Paddle's CPU kernels for half types round after each step (scale: x * s, then + b);
# graphgate computes in float32 and rounds once, as Paddle's GPU kernels do.
TOLERANCES: Final[dict[str, tuple[float, float]]] = {  # (rtol, atol)
    "scale/float16": (2e-3, 2e-3),
    "scale/bfloat16": (1e-2, 4e-3),
}


CASES: Final = {
    name: Case(
        name.split("/")[0],
        build,
        adjust=FEEDS.get(name),
        random_params=True,
        tolerance=TOLERANCES.get(name, TOLERANCE),
    )
    for name, build in sorted(BUILDS.items())
}
