"""A text classifier built by real Paddle: embedding, bidirectional two-layer LSTM over padded
sequences, pooling over time, fc and softmax, and its feeds at the sizes in SHAPES.
test_text_classifier.py and test_pir.py run it; batchability.py reports it."""

from __future__ import annotations

from functools import cache
from typing import Any, Final

import numpy as np

from tests.conformance.paddle_util import (
    Saved,
    build_and_save,
    install_legacy_compat,
    paddle,
)

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


def classifier_feeds(batch: int, steps: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(batch * 100 + steps)
    lengths = rng.integers(1, steps + 1, batch)
    lengths[0] = steps
    ids = rng.integers(1, VOCABULARY, (batch, steps))
    ids[np.arange(steps) >= lengths[:, None]] = 0
    return {"ids": ids.astype(np.int64), "lengths": lengths.astype(np.int64)}
