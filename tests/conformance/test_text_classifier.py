"""A text classifier: embedding, bidirectional two-layer LSTM over padded sequences, pooling over
time, fc and softmax, built by real Paddle and run by graphgate with Paddle's numbers."""

from __future__ import annotations

import numpy as np
import pytest

# Imported first: paddle_util switches Paddle to legacy programs before importing it.
pytest.importorskip("tests.conformance.paddle_util")

from tests.conformance.paddle_util import (
    assert_parity,
    dims_differences,
    op_types,
)
from tests.conformance.text_classifier import CLASSES, SHAPES, classifier, classifier_feeds
from validator import validate

pytestmark = pytest.mark.paddle


def test_classifier_is_embedding_lstm_pooling_fc() -> None:
    saved = classifier()
    ops = op_types(saved.program)
    assert {"lookup_table_v2", "rnn", "reduce_sum", "reduce_max", "softmax"} <= ops
    assert dims_differences(validate(saved.program, saved.params), saved.program) == []


@pytest.mark.parametrize(("batch", "steps"), SHAPES)
def test_classifier_equals_paddle(batch: int, steps: int) -> None:
    ours = assert_parity(classifier(), classifier_feeds(batch, steps))
    probabilities = ours[classifier().fetches[0]]
    assert probabilities.shape == (batch, CLASSES)
    np.testing.assert_allclose(probabilities.sum(axis=1), np.ones(batch), rtol=1e-5)
