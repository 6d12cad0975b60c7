"""set_value beyond the parity table: the typed value lists Paddle 2.x wrote (which Paddle 3.3.1
no longer reads, so they are compared with Paddle's run of the same program spelt `values`),
and writes into parameters, which are refused."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import onnx
import pytest

# Imported first: paddle_util switches Paddle to legacy programs before importing it.
pytest.importorskip("tests.conformance.paddle_util")

from executor import SessionOptions, compile
from graph_proto import framework_pb2 as pb
from tests.conformance.paddle_util import Saved, build_and_save, paddle, run_paddle
from validator import ValidationFailed, validate

pytestmark = pytest.mark.paddle


def _set_value(x: Any, out: Any, values: list[float], **attrs: Any) -> None:
    helper = paddle.base.layer_helper.LayerHelper("set_value")
    attrs = {"steps": [1] * len(attrs["axes"]), "shape": [len(values)], "values": values} | attrs
    helper.append_op(type="set_value", inputs={"Input": [x]}, outputs={"Out": [out]}, attrs=attrs)


def _spelt_legacy(saved: Saved, legacy: str, kind: int, field: str) -> Saved:
    """The saved program with set_value's `values` (SCALARS) moved to a typed list `legacy`."""
    program = pb.ProgramDesc.FromString(saved.program)
    for op in program.blocks[0].ops:
        if op.type != "set_value":
            continue
        (values,) = [a for a in op.attrs if a.name == "values"]
        numbers = [s.r if s.type == 3 else s.i for s in values.scalars]
        op.attrs.remove(values)
        attr = op.attrs.add(name=legacy, type=kind)
        getattr(attr, field).extend(numbers)
    return replace(saved, program=program.SerializeToString())


@pytest.mark.parametrize(
    ("dtype", "legacy", "kind", "field", "values"),
    [
        ("float32", "fp32_values", pb.FLOATS, "floats", [2.5, -1.0]),
        ("float64", "fp64_values", pb.FLOAT64S, "float64s", [2.5, -1.0]),
        ("int64", "int64_values", pb.LONGS, "longs", [7, -3]),
        ("int32", "int32_values", pb.INTS, "ints", [7, -3]),
    ],
)
def test_legacy_value_lists_give_paddles_result(
    dtype: str, legacy: str, kind: int, field: str, values: list[float]
) -> None:
    def build() -> tuple[list[Any], list[Any]]:
        x = paddle.static.data("x", [-1, 3, 4], dtype)
        y = x * 1
        _set_value(y, y, values, axes=[1, 2], starts=[0, 3], ends=[3, -5], steps=[2, -2])
        return [x], [y]

    saved = build_and_save(build)
    legacy_saved = _spelt_legacy(saved, legacy, kind, field)
    assert legacy.encode() in legacy_saved.program and b"values" in legacy_saved.program
    feeds = {"x": np.arange(24).reshape(2, 3, 4).astype(dtype)}
    expected = run_paddle(saved, feeds)[0]
    validated = validate(legacy_saved.program, legacy_saved.params)
    got = compile(validated, SessionOptions(use_cuda=False)).run(feeds)[saved.fetches[0]]
    assert got.dtype == expected.dtype
    np.testing.assert_allclose(got, expected, rtol=0, atol=0)
    assert not np.array_equal(got, feeds["x"])  # the slice was written


def _refusal(build: Any) -> list[str]:
    saved = build_and_save(build)
    with pytest.raises(ValidationFailed) as info:
        validate(saved.program, saved.params)
    return [f"{d.code}: {d.message}" for d in info.value.diagnostics]


def test_set_value_over_a_parameter_in_place_is_refused() -> None:
    def build() -> tuple[list[Any], list[Any]]:
        x = paddle.static.data("x", [-1, 4], "float32")
        w = paddle.static.create_parameter([4], "float32", name="w")
        _set_value(w, w, [0.0], axes=[0], starts=[0], ends=[2])
        return [x], [x * w]

    problems = _refusal(build)
    assert any(p.startswith("VAR_WRITES_PARAM") and "'w'" in p for p in problems), problems


def test_set_value_into_a_new_persistable_var_is_refused() -> None:
    def build() -> tuple[list[Any], list[Any]]:
        x = paddle.static.data("x", [2, 4], "float32")
        w = paddle.static.create_parameter([4], "float32", name="w")
        kept = paddle.static.create_global_var(
            [2, 4], 0.0, "float32", persistable=True, name="kept"
        )
        _set_value(x, kept, [1.0], axes=[1], starts=[0], ends=[2])
        return [x], [kept * w]

    problems = _refusal(build)
    assert any(p.startswith("VAR_WRITES_PARAM") and "'kept'" in p for p in problems), problems


@pytest.mark.parametrize(
    ("start", "end", "step"),
    [(0, 2, 1), (1, 3, 1), (2, 4, 1), (0, 4, 1), (0, 4, 2), (3, 1, -1)],
)
def test_a_run_along_one_axis_is_written_without_transposes(
    start: int, end: int, step: int
) -> None:
    """ReXNet's `out[:, start:end] = out[:, start:end] + x`: a run of consecutive channels is
    written as X's parts around it and the updates, concatenated (no Transposes of X around a
    ScatterND); strided or reversed slices still scatter. Both give Paddle's result."""

    def build() -> tuple[list[Any], list[Any]]:
        out = paddle.static.data("out", [-1, 4, 3, 3], "float32")
        x = paddle.static.data("x", [-1, 4, 3, 3], "float32")
        picked = (slice(None), slice(start, end, step))
        written = paddle.static.setitem(out, picked, out[picked] + x[picked])
        return [out, x], [written]

    saved = build_and_save(build)
    model = compile(validate(saved.program, saved.params), SessionOptions(use_cuda=False))
    rng = np.random.default_rng(5)
    feeds = {n: rng.standard_normal((2, 4, 3, 3)).astype(np.float32) for n in ("out", "x")}
    (expected,) = run_paddle(saved, feeds)
    (got,) = model.run(feeds).values()
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    kinds = {n.op_type for n in onnx.load_from_string(model.onnx_bytes).graph.node}
    assert "set_value" in {op.type for op in pb.ProgramDesc.FromString(saved.program).blocks[0].ops}
    consecutive = step == 1
    assert ("ScatterND" in kinds) != consecutive
    assert ("Transpose" in kinds) != consecutive
