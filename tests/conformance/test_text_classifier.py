"""A text classifier: embedding, bidirectional two-layer LSTM over padded sequences, pooling over
time, fc and softmax, built by real Paddle and run by graphgate with Paddle's numbers."""

from __future__ import annotations

from functools import cache
from typing import Any, Final

import numpy as np
import pytest

# Imported first: paddle_util switches Paddle to legacy programs before importing it.
pytest.importorskip("tests.conformance.paddle_util")

from tests.conformance.paddle_util import (
    Saved,
    assert_parity,
    build_and_save,
    dims_differences,
    install_legacy_compat,
    op_types,
    paddle,
)
from validator import validate

pytestmark = pytest.mark.paddle

VOCABULARY, EMBEDDING, HIDDEN, CLASSES = 50, 16, 8, 4


@cache
def classifier() -> Saved:
    """ids [-1, -1] int64 and lengths [-1] int64 -> class probabilities [-1, CLASSES]."""
    install_legacy_compat()  # matmul only traces to PIR in Paddle 3.3.1
    return build_and_save(network)


def network() -> tuple[list[Any], list[Any]]:
    """The classifier's (feeds, fetches), traced under either program format (test_pir saves it
    as PIR): probabilities and the LSTM's final states.

    Pooling: the mean over each row's valid steps (the LSTM zeroes the padded ones, so the sum
    over time divided by the length) next to the max over time."""
    ids = paddle.static.data("ids", [-1, -1], "int64")
    lengths = paddle.static.data("lengths", [-1], "int64")
    embedding = paddle.nn.Embedding(VOCABULARY, EMBEDDING, padding_idx=0)
    lstm = paddle.nn.LSTM(EMBEDDING, HIDDEN, num_layers=2, direction="bidirect")
    fc = paddle.nn.Linear(4 * HIDDEN, CLASSES)
    for layer in (embedding, lstm, fc):
        layer.eval()
    out, (h, c) = lstm(embedding(ids), sequence_length=lengths)
    steps = paddle.unsqueeze(paddle.cast(lengths, "float32"), -1)
    mean = paddle.divide(paddle.sum(out, axis=1), steps)
    pooled = paddle.concat([mean, paddle.max(out, axis=1)], axis=-1)
    return [ids, lengths], [paddle.nn.functional.softmax(fc(pooled)), h, c]


# (batch, steps): batch 1 and a batch of rows of different lengths, padded with id 0.
SHAPES: Final = ((1, 7), (5, 9))


def _feeds(batch: int, steps: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(batch * 100 + steps)
    lengths = rng.integers(1, steps + 1, batch)
    lengths[0] = steps
    ids = rng.integers(1, VOCABULARY, (batch, steps))
    ids[np.arange(steps) >= lengths[:, None]] = 0
    return {"ids": ids.astype(np.int64), "lengths": lengths.astype(np.int64)}


def test_classifier_is_embedding_lstm_pooling_fc() -> None:
    saved = classifier()
    ops = op_types(saved.program)
    assert {"lookup_table_v2", "rnn", "reduce_sum", "reduce_max", "softmax"} <= ops
    assert dims_differences(validate(saved.program, saved.params), saved.program) == []


@pytest.mark.parametrize(("batch", "steps"), SHAPES)
def test_classifier_equals_paddle(batch: int, steps: int) -> None:
    ours = assert_parity(classifier(), _feeds(batch, steps))
    probabilities = ours[classifier().fetches[0]]
    assert probabilities.shape == (batch, CLASSES)
    np.testing.assert_allclose(probabilities.sum(axis=1), np.ones(batch), rtol=1e-5)
