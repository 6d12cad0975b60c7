"""rnn as paddle.nn.LSTM, GRU and SimpleRNN export it: every variant equal to Paddle's Executor.

Every mode (LSTM, GRU, SimpleRNN tanh and relu) x 1 or 2 layers x forward or bidirectional x
with or without sequence_length x initial states given or not, each fetching the sequence
output and every final state, at batch 1 and 3 (odd and even step counts; one row of length 0,
one of full length). Variants graphgate cannot reproduce exactly are refused with their code.
"""

from __future__ import annotations

import itertools
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
from tests.conformance.rnn import BATCHES, HIDDEN, INPUT, LAYERS, rnn_feeds, rnn_program
from validator import ValidationFailed, validate
from validator.diagnostics import Code

pytestmark = pytest.mark.paddle


@cache
def _saved(mode: str, layers: int, bidirec: bool, with_lengths: bool, with_initial: bool) -> Saved:
    return build_and_save(rnn_program(mode, layers, bidirec, with_lengths, with_initial))


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
        feeds = rnn_feeds(saved, mode, rows, batch, steps, row_lengths)
        assert_parity(saved, feeds)


def test_time_major_lstm_has_no_transposes_and_equals_paddle() -> None:
    saved = build_and_save(rnn_program("LSTM", 2, True, True, True, time_major=True))
    assert "transpose2" not in op_types(saved.program)
    feeds = rnn_feeds(saved, "LSTM", 4, 3, 6, [6, 1, 3], time_major=True)
    assert_parity(saved, feeds)


def test_int32_sequence_length_equals_paddle() -> None:
    saved = build_and_save(rnn_program("GRU", 2, True, True, True, lengths_dtype="int32"))
    assert_parity(saved, rnn_feeds(saved, "GRU", 4, 3, 5, [2, 5, 0], lengths_dtype=np.int32))


def test_dropout_between_layers_is_skipped_in_inference() -> None:
    # save_inference_model sets is_test, and the kernel then ignores dropout_prob.
    saved = build_and_save(rnn_program("LSTM", 3, True, False, False, dropout=0.5))
    assert _rnn_attrs(saved.program)["dropout_prob"].f == pytest.approx(0.5)
    assert_parity(saved, rnn_feeds(saved, "LSTM", 6, 2, 5, []))


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
    saved = _training_mode(build_and_save(rnn_program("GRU", 2, True, True, False)))
    assert_parity(saved, rnn_feeds(saved, "GRU", 4, 3, 5, [5, 3, 1]))


def test_training_dropout_is_refused() -> None:
    saved = _training_mode(build_and_save(rnn_program("LSTM", 2, False, False, False, dropout=0.5)))
    feeds = rnn_feeds(saved, "LSTM", 2, 2, 5, [])
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
