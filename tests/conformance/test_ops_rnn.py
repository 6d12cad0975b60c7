"""rnn as paddle.nn.LSTM, GRU and SimpleRNN export it: every variant equal to Paddle's Executor.

Every mode (LSTM, GRU, SimpleRNN tanh and relu) x 1 or 2 layers x forward or bidirectional x
with or without sequence_length x initial states given or not, each fetching the sequence
output and every final state, at batch 1 and 3 (odd and even step counts; one row of length 0,
one of full length). Variants graphgate cannot reproduce exactly are refused with their code.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from functools import cache
from typing import Any, Final

import numpy as np
import pytest

# Imported first: paddle_util switches Paddle to legacy programs before importing it.
pytest.importorskip("tests.conformance.paddle_util")

from graph_proto import framework_pb2 as pb
from tests.conformance.paddle_util import (
    Saved,
    assert_parity,
    build_and_save,
    dims_differences,
    op_types,
    paddle,
    run_paddle,
)
from validator import ValidationFailed, validate
from validator.diagnostics import Code

pytestmark = pytest.mark.paddle

INPUT, HIDDEN = 4, 3
LAYERS: Final[dict[str, Callable[..., Any]]] = {
    "LSTM": lambda **kw: paddle.nn.LSTM(INPUT, HIDDEN, **kw),
    "GRU": lambda **kw: paddle.nn.GRU(INPUT, HIDDEN, **kw),
    "RNN_TANH": lambda **kw: paddle.nn.SimpleRNN(INPUT, HIDDEN, **kw),
    "RNN_RELU": lambda **kw: paddle.nn.SimpleRNN(INPUT, HIDDEN, activation="relu", **kw),
}
# (batch, steps, lengths): batch 1 with an odd step count, batch 3 with an even one, where one
# row is empty (Paddle keeps its initial state) and one is full.
BATCHES: Final = ((1, 5, [3]), (3, 4, [4, 0, 2]))


def _state_names(mode: str) -> list[str]:
    return ["h0", "c0"] if mode == "LSTM" else ["h0"]


def _build(
    mode: str,
    layers: int,
    bidirec: bool,
    with_lengths: bool,
    with_initial: bool,
    *,
    time_major: bool = False,
    dropout: float = 0.0,
    lengths_dtype: str = "int64",
) -> Callable[[], tuple[list[Any], list[Any]]]:
    """Batch and time dims are -1 in the program; fetches Out and every final state."""
    rows = layers * (2 if bidirec else 1)

    def build() -> tuple[list[Any], list[Any]]:
        x = paddle.static.data("x", [-1, -1, INPUT], "float32")
        feeds = [x]
        net = LAYERS[mode](
            num_layers=layers,
            direction="bidirect" if bidirec else "forward",
            time_major=time_major,
            dropout=dropout,
        )
        initial = None
        if with_initial:
            states = [
                paddle.static.data(n, [rows, -1, HIDDEN], "float32") for n in _state_names(mode)
            ]
            feeds += states
            initial = tuple(states) if mode == "LSTM" else states[0]
        lengths = None
        if with_lengths:
            lengths = paddle.static.data("lengths", [-1], lengths_dtype)
            feeds.append(lengths)
        out, final = net(x, initial, sequence_length=lengths)
        return feeds, [out, *(final if mode == "LSTM" else [final])]

    return build


@cache
def _saved(mode: str, layers: int, bidirec: bool, with_lengths: bool, with_initial: bool) -> Saved:
    return build_and_save(_build(mode, layers, bidirec, with_lengths, with_initial))


def _feeds(
    saved: Saved,
    mode: str,
    rows: int,
    batch: int,
    steps: int,
    lengths: list[int],
    *,
    time_major: bool = False,
    lengths_dtype: Any = np.int64,
) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(batch * 10 + steps)
    x_shape = (steps, batch, INPUT) if time_major else (batch, steps, INPUT)
    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32)}
    for name in _state_names(mode):
        feeds[name] = rng.standard_normal((rows, batch, HIDDEN)).astype(np.float32)
    feeds["lengths"] = np.asarray(lengths, lengths_dtype)
    return {name: feeds[name] for name in saved.feeds}


VARIANTS: Final = [
    pytest.param(*v, id="-".join(map(str, v)))
    for v in itertools.product(
        LAYERS, (1, 2), ("forward", "bidirect"), ("lengths", "full"), ("initial", "zeros")
    )
]


@pytest.mark.parametrize(("mode", "layers", "direction", "lengths", "initial"), VARIANTS)
def test_rnn_variant_equals_paddle(
    mode: str, layers: int, direction: str, lengths: str, initial: str
) -> None:
    bidirec = direction == "bidirect"
    saved = _saved(mode, layers, bidirec, lengths == "lengths", initial == "initial")
    assert "rnn" in op_types(saved.program)
    assert dims_differences(validate(saved.program, saved.params), saved.program) == []
    rows = layers * (2 if bidirec else 1)
    for batch, steps, row_lengths in BATCHES:
        feeds = _feeds(saved, mode, rows, batch, steps, row_lengths)
        assert_parity(saved, feeds)


def test_time_major_lstm_has_no_transposes_and_equals_paddle() -> None:
    saved = build_and_save(_build("LSTM", 2, True, True, True, time_major=True))
    assert "transpose2" not in op_types(saved.program)
    feeds = _feeds(saved, "LSTM", 4, 3, 6, [6, 1, 3], time_major=True)
    assert_parity(saved, feeds)


def test_int32_sequence_length_equals_paddle() -> None:
    saved = build_and_save(_build("GRU", 2, True, True, True, lengths_dtype="int32"))
    assert_parity(saved, _feeds(saved, "GRU", 4, 3, 5, [2, 5, 0], lengths_dtype=np.int32))


def test_dropout_between_layers_is_skipped_in_inference() -> None:
    # save_inference_model sets is_test, and the kernel then ignores dropout_prob.
    saved = build_and_save(_build("LSTM", 3, True, False, False, dropout=0.5))
    assert _rnn_attrs(saved.program)["dropout_prob"].f == pytest.approx(0.5)
    assert_parity(saved, _feeds(saved, "LSTM", 6, 2, 5, []))


def _rnn_attrs(program: bytes) -> dict[str, pb.OpDesc.Attr]:
    (op,) = [op for op in pb.ProgramDesc.FromString(program).blocks[0].ops if op.type == "rnn"]
    return {a.name: a for a in op.attrs}


def _training_mode(saved: Saved) -> Saved:
    """The program as a layer in training mode writes it: is_test false.

    NOTE: save_inference_model always sets is_test; Paddle's Executor runs the flipped program
    with its training kernel path."""
    program = pb.ProgramDesc.FromString(saved.program)
    for op in program.blocks[0].ops:
        for attr in op.attrs:
            if op.type == "rnn" and attr.name == "is_test":
                attr.b = False
    return Saved(program.SerializeToString(), saved.params, saved.feeds, saved.fetches)


def _assert_refused(saved: Saved, code: Code, message: str) -> None:
    """validate() refuses `saved` with exactly `code`, its message containing `message`."""
    with pytest.raises(ValidationFailed) as info:
        validate(saved.program, saved.params)
    assert info.value.codes == [code]
    assert message in str(info.value)


def test_training_mode_without_dropout_equals_paddle() -> None:
    saved = _training_mode(build_and_save(_build("GRU", 2, True, True, False)))
    assert_parity(saved, _feeds(saved, "GRU", 4, 3, 5, [5, 3, 1]))


def test_training_dropout_is_refused() -> None:
    saved = _training_mode(build_and_save(_build("LSTM", 2, False, False, False, dropout=0.5)))
    feeds = _feeds(saved, "LSTM", 2, 2, 5, [])
    assert len(run_paddle(saved, feeds)) == 3  # a program Paddle runs, with random dropout
    _assert_refused(
        saved,
        Code.RNN_UNSUPPORTED,
        "expected is_test true or dropout_prob 0 (inference), got is_test false",
    )


def test_float64_is_refused() -> None:
    # onnxruntime's LSTM, GRU and RNN kernels are float32 only; Paddle's CPU kernel runs float64.
    def build() -> tuple[list[Any], list[Any]]:
        x = paddle.static.data("x", [-1, -1, INPUT], "float64")
        out, final = paddle.nn.GRU(INPUT, HIDDEN)(x)
        return [x], [out, final]

    previous = paddle.get_default_dtype()
    paddle.set_default_dtype("float64")
    try:
        saved = build_and_save(build)
    finally:
        paddle.set_default_dtype(previous)
    x = np.random.default_rng(0).standard_normal((2, 3, INPUT))
    assert run_paddle(saved, {"x": x})[0].dtype == np.float64
    _assert_refused(
        saved,
        Code.RNN_UNSUPPORTED,
        "expected float32 (onnxruntime's LSTM, GRU and RNN kernels), got float64",
    )


def test_bias_free_layer_paddle_cannot_run_is_refused() -> None:
    # NOTE: paddle.nn.GRU without biases still exports the fused rnn op, with two weights where
    # the kernel reads four; Paddle's Executor dies of a segmentation fault on it, so it is not
    # run here.
    def build() -> tuple[list[Any], list[Any]]:
        x = paddle.static.data("x", [-1, -1, INPUT], "float32")
        out, final = paddle.nn.GRU(INPUT, HIDDEN, bias_ih_attr=False, bias_hh_attr=False)(x)
        return [x], [out, final]

    saved = build_and_save(build)
    _assert_refused(
        saved,
        Code.SHAPE_MISMATCH,
        "WeightList: expected 4 tensors (1 layers x 1 directions x 4), got 2",
    )
