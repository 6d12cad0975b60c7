"""rnn's SequenceLength fed at run time: a length outside [0, T] fails the request with a typed
error (Paddle's output is undefined there), nothing written to stderr; lengths inside equal
Paddle's Executor, 0 and T included."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np
import onnx
import pytest

# Imported first: paddle_util switches Paddle to legacy programs before importing it.
pytest.importorskip("tests.conformance.paddle_util")

from executor import CompiledModel, SessionOptions, compile
from executor.errors import IndexOutOfRange
from graph_proto import framework_pb2 as pb
from tests.conformance.paddle_util import (
    Saved,
    assert_parity,
    build_and_save,
    paddle,
    run_paddle,
)
from validator import validate

pytestmark = pytest.mark.paddle

INPUT, HIDDEN, STEPS, BATCH = 4, 3, 5, 3


def _build(mode: str, steps: int, lengths_dtype: str) -> Callable[[], tuple[list[Any], list[Any]]]:
    """A bidirectional 2-layer net over x [-1, steps, INPUT] (steps -1: known at run time)."""

    def build() -> tuple[list[Any], list[Any]]:
        x = paddle.static.data("x", [-1, steps, INPUT], "float32")
        lengths = paddle.static.data("lengths", [-1], lengths_dtype)
        layer = paddle.nn.LSTM if mode == "LSTM" else paddle.nn.GRU
        net = layer(INPUT, HIDDEN, num_layers=2, direction="bidirect")
        out, final = net(x, sequence_length=lengths)
        return [x, lengths], [out, *(final if mode == "LSTM" else [final])]

    return build


@cache
def _saved(mode: str, steps: int, lengths_dtype: str) -> Saved:
    return build_and_save(_build(mode, steps, lengths_dtype))


@cache
def _compiled(mode: str, steps: int, lengths_dtype: str) -> CompiledModel:
    saved = _saved(mode, steps, lengths_dtype)
    return compile(validate(saved.program, saved.params), SessionOptions(use_cuda=False))


def _rnn_index(saved: Saved) -> int:
    ops = pb.ProgramDesc.FromString(saved.program).blocks[0].ops
    (index,) = [i for i, op in enumerate(ops) if op.type == "rnn"]
    return index


def _feeds(lengths: list[int], dtype: str) -> dict[str, np.ndarray]:
    x = np.random.default_rng(len(lengths)).standard_normal((len(lengths), STEPS, INPUT))
    return {"x": x.astype(np.float32), "lengths": np.asarray(lengths, dtype)}


VARIANTS = [
    pytest.param("LSTM", -1, "int64", id="lstm-dynamic-steps"),
    pytest.param("GRU", STEPS, "int64", id="gru-static-steps"),
    pytest.param("LSTM", STEPS, "int32", id="lstm-int32"),
]


@pytest.mark.parametrize(("mode", "steps", "dtype"), VARIANTS)
@pytest.mark.parametrize(
    ("lengths", "got"),
    [
        pytest.param([2, -1, 3], -1, id="minus-1"),
        pytest.param([STEPS, STEPS + 1, 0], STEPS + 1, id="steps-plus-1"),
        pytest.param([-7, 99, 1], -7, id="first-outside"),
    ],
)
def test_a_length_outside_0_to_steps_fails_typed_and_quietly(
    mode: str,
    steps: int,
    dtype: str,
    lengths: list[int],
    got: int,
    capfd: pytest.CaptureFixture[str],
) -> None:
    model = _compiled(mode, steps, dtype)
    capfd.readouterr()
    with pytest.raises(IndexOutOfRange) as info:
        model.run(_feeds(lengths, dtype))
    index = _rnn_index(_saved(mode, steps, dtype))
    expected = f"op {index} (rnn): expected SequenceLength in [0, {STEPS}], got {got}"
    assert str(info.value) == expected
    assert info.value.code == "INDEX_OUT_OF_RANGE"
    assert capfd.readouterr() == ("", "")


@pytest.mark.parametrize(("mode", "steps", "dtype"), VARIANTS)
@pytest.mark.parametrize(
    "lengths", [pytest.param([STEPS, 0, 2], id="0-and-T"), pytest.param([1], id="batch-1")]
)
def test_lengths_inside_0_to_steps_equal_paddle(
    mode: str, steps: int, dtype: str, lengths: list[int]
) -> None:
    assert_parity(_saved(mode, steps, dtype), _feeds(lengths, dtype))


def test_the_same_model_runs_again_after_a_refused_request() -> None:
    model = _compiled("GRU", STEPS, "int64")
    with pytest.raises(IndexOutOfRange):
        model.run(_feeds([STEPS + 1], "int64"))
    saved, feeds = _saved("GRU", STEPS, "int64"), _feeds([STEPS, 3], "int64")
    ours = model.run(feeds)
    for name, theirs in zip(saved.fetches, run_paddle(saved, feeds), strict=True):
        np.testing.assert_allclose(ours[name], theirs, rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.parametrize(
    ("steps", "on_host"),
    [pytest.param(STEPS, True, id="static-steps"), pytest.param(-1, False, id="dynamic-steps")],
)
def test_fed_lengths_are_checked_on_the_host_when_the_steps_are_known_before_running(
    steps: int, on_host: bool
) -> None:
    """T known at compile time: the session checks the fed lengths, the graph has no guard. T of
    x transposed in the program (known only in the graph): the guard stays in the graph."""
    model = _compiled("LSTM", steps, "int64")
    assert bool(model.checks.host_checks) == on_host
    assert bool(model.checks.index_checks) != on_host
    reductions = {n.op_type for n in onnx.load_from_string(model.onnx_bytes).graph.node}
    assert ("ReduceMin" in reductions) != on_host
