"""rnn as paddle.nn.LSTM, GRU and SimpleRNN export it: the build of one variant (mode, layers,
direction, with or without sequence_length and initial states) and its feeds at the sizes in
BATCHES. test_ops_rnn.py runs every variant, test_pir.py a few as PIR programs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import numpy as np

from tests.conformance.paddle_util import (
    Saved,
    paddle,
)

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


def rnn_program(
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


def rnn_feeds(
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
