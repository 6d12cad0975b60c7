"""Budgets bind what the program fixes: a small GPT-style decoder whose causal
mask is a fixed [1, 1, 128, 128] buffer sliced by the dynamic sequence length. Binding that
length to max_dynamic_dim (512) contradicts the mask; the figures are taken at the 128 the
program fixes (solved from the mask the length slices), not at an absurd upper bound, and it is
accepted at batch 1."""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import pytest

from tests.conformance.paddle_util import (
    Saved,
    assert_parity,
    build_and_save,
    install_legacy_compat,
    paddle,
)
from validator import Policy, ValidationFailed, validate
from validator.diagnostics import Code

pytestmark = pytest.mark.paddle
install_legacy_compat()

POSITIONS: Final = 128
HIDDEN: Final = 32
HEADS: Final = 4
VOCAB: Final = 100
LAYERS: Final = 2


def _attention(h: Any, mask: Any) -> Any:
    batch, seq = paddle.shape(h)[0], paddle.shape(h)[1]
    qkv = paddle.static.nn.fc(h, 3 * HIDDEN, num_flatten_dims=2)
    qkv = paddle.reshape(qkv, [0, 0, 3, HEADS, HIDDEN // HEADS])
    qkv = paddle.transpose(qkv, [2, 0, 3, 1, 4])  # [3, batch, heads, seq, head dim]
    q, k, v = qkv[0], qkv[1], qkv[2]
    scores = paddle.matmul(q, k, transpose_y=True) * (HIDDEN // HEADS) ** -0.5
    scores = scores + (1.0 - mask) * -1e4
    context = paddle.matmul(paddle.nn.functional.softmax(scores, -1), v)
    context = paddle.reshape(paddle.transpose(context, [0, 2, 1, 3]), [batch, seq, HIDDEN])
    return paddle.static.nn.fc(context, HIDDEN, num_flatten_dims=2)


def _block(h: Any, mask: Any) -> Any:
    h = h + _attention(paddle.nn.functional.layer_norm(h, [HIDDEN]), mask)
    inner = paddle.static.nn.fc(
        paddle.nn.functional.layer_norm(h, [HIDDEN]), 4 * HIDDEN, num_flatten_dims=2
    )
    return h + paddle.static.nn.fc(paddle.nn.functional.gelu(inner), HIDDEN, num_flatten_dims=2)


def _gpt() -> tuple[list[Any], list[Any]]:
    ids = paddle.static.data("ids", [-1, -1], "int64")
    seq = paddle.shape(ids)[1]
    words = paddle.static.nn.embedding(ids, [VOCAB, HIDDEN])
    positions = paddle.static.nn.embedding(
        paddle.unsqueeze(paddle.arange(0, seq, dtype="int64"), 0), [POSITIONS, HIDDEN]
    )
    causal = paddle.static.create_parameter(
        [1, 1, POSITIONS, POSITIONS],
        "float32",
        name="causal_mask",
        default_initializer=paddle.nn.initializer.Assign(
            np.tril(np.ones((1, 1, POSITIONS, POSITIONS), np.float32))
        ),
    )
    causal.stop_gradient = True
    mask = causal[:, :, :seq, :seq]
    h = words + positions
    for _ in range(LAYERS):
        h = _block(h, mask)
    logits = paddle.static.nn.fc(
        paddle.nn.functional.layer_norm(h, [HIDDEN]), VOCAB, num_flatten_dims=2
    )
    return [ids], [logits]


@pytest.fixture(scope="module")
def gpt() -> Saved:
    return build_and_save(_gpt)


def test_accepted_at_batch_1_with_budgets_at_the_solved_length(gpt: Saved) -> None:
    report = validate(gpt.program, gpt.params, Policy(max_batch=1)).report
    assert report.batch == 1
    # The largest tensor at 128 positions: the attention scores, float32 [1, heads, 128, 128]
    # (the logits [1, 128, vocab] and the MLP's [1, 128, 4 * hidden] are smaller).
    assert report.largest_tensor_bytes == 4 * HEADS * POSITIONS * POSITIONS
    # Per token and layer: the projections (2 FLOPs per weight) and attention's two matmuls
    # over 128 positions dominate; the figure lies within a small factor of them.
    weights = LAYERS * (3 * HIDDEN * HIDDEN + HIDDEN * HIDDEN + 8 * HIDDEN * HIDDEN)
    attention = LAYERS * 2 * 2 * POSITIONS * HIDDEN
    core = POSITIONS * (2 * (weights + HIDDEN * VOCAB) + attention)
    assert core <= report.flops_per_sample <= 3 * core
    # The sequence length is solved from the program (the mask it slices has 128 positions),
    # not pinned by a fallback: the bound comes with the op that sets it.
    assert ("D1", 128) in report.dim_bounds
    (bound,) = [c for c in report.dim_constraints if c.feed == "ids" and c.axis == 1]
    assert bound.constraint.value == 128 and "op 28 (elementwise_add)" in bound.reason
    codes = [w.code for w in report.warnings]
    assert Code.BUDGET_PINNED_DIMS not in codes and Code.BUDGET_UPPER_BOUND not in codes


def test_the_caps_apply_at_the_solved_length(gpt: Saved) -> None:
    scores = 4 * HEADS * POSITIONS * POSITIONS  # float32 [1, heads, 128, 128]
    # 512 positions would make 16x that: a cap between is no reason to refuse.
    validate(gpt.program, gpt.params, Policy(max_batch=1, max_tensor_bytes=scores))
    with pytest.raises(ValidationFailed) as info:
        validate(gpt.program, gpt.params, Policy(max_batch=1, max_tensor_bytes=scores - 1))
    assert [d.code for d in info.value.diagnostics] == [Code.TENSOR_TOO_LARGE]
    assert f"[1, {HEADS}, {POSITIONS}, {POSITIONS}]" in str(info.value)


@pytest.mark.parametrize("batch_and_length", [(1, 128), (2, 7)])
def test_outputs_match_paddle(gpt: Saved, batch_and_length: tuple[int, int]) -> None:
    batch, length = batch_and_length
    ids = np.random.default_rng(length).integers(0, VOCAB, (batch, length)).astype(np.int64)
    assert_parity(gpt, {"ids": ids}, rtol=1e-4, atol=1e-4)
