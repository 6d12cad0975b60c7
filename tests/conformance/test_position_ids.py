"""Position and token type ids as the transformer families build them, by real Paddle: the
serving graph reads them with no range guard (executor/lower/_ranges.py), and graphgate still
answers and refuses exactly what Paddle's Executor does, at the sequence lengths either side
of the table's size and with empty inputs; the portable form keeps its guards for runtimes
that make no checks of their own."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest

# Imported first: paddle_util switches Paddle to legacy programs before importing it.
pytest.importorskip("tests.conformance.paddle_util")

from executor import CompiledModel, SessionOptions, compile
from executor.convert import export
from executor.errors import IndexOutOfRange
from executor.runtime_checks import Bound
from tests.conformance.paddle_util import Saved, build_and_save, paddle, run_paddle
from validator import validate

pytestmark = pytest.mark.paddle

POSITIONS = 8  # rows of the position table
GUARD_NODES = {"ReduceMin", "ReduceMax"}


def bert() -> tuple[list[Any], list[Any]]:
    """cumsum(ones_like(ids)) - ones_like(ids), and token types zeros_like(ids)."""
    ids = paddle.static.data("ids", [-1, -1], "int64")
    ones = paddle.ones_like(ids)
    positions = paddle.cumsum(ones, axis=1) - ones
    types = paddle.nn.Embedding(2, 4)(paddle.zeros_like(ids))
    return [ids], [paddle.nn.Embedding(POSITIONS, 4)(positions) + types]


def ernie() -> tuple[list[Any], list[Any]]:
    """ones of [shape(words)[0], shape(words)[1]], the words with a padding row."""
    ids = paddle.static.data("ids", [-1, -1], "int64")
    words = paddle.nn.Embedding(50, 4, padding_idx=0)(ids)
    shape = paddle.shape(words)
    ones = paddle.ones([shape[0], shape[1]], "int64")
    positions = paddle.cumsum(ones, axis=-1) - ones
    return [ids], [words + paddle.nn.Embedding(POSITIONS, 4)(positions)]


def tinybert() -> tuple[list[Any], list[Any]]:
    """The position ids through a scale of 1 (x * 1 + 0)."""
    ids = paddle.static.data("ids", [-1, -1], "int64")
    ones = paddle.ones_like(ids)
    positions = paddle.scale(paddle.cumsum(ones, axis=1) - ones, 1.0)
    return [ids], [paddle.nn.Embedding(POSITIONS, 4)(positions)]


def roberta() -> tuple[list[Any], list[Any]]:
    """A running count of the ids other than the padding id 1, plus 1: the data decides the
    largest, so the guard stays."""
    ids = paddle.static.data("ids", [-1, -1], "int64")
    mask = paddle.cast(ids != 1, "int64")
    positions = paddle.cumsum(mask, axis=1) * mask + 1
    return [ids], [paddle.nn.Embedding(POSITIONS, 4)(positions)]


SHAPE_CHECKED = {"bert": bert, "ernie": ernie, "tinybert": tinybert}


def built(build: Callable[[], tuple[list[Any], list[Any]]]) -> tuple[Saved, CompiledModel]:
    saved = build_and_save(build)
    validated = validate(saved.program, saved.params)
    return saved, compile(validated, SessionOptions(use_cuda=False))


def node_types(model: CompiledModel) -> set[str]:
    return {node.op_type for node in onnx.load_from_string(model.onnx_bytes).graph.node}


def answers_as_paddle(saved: Saved, model: CompiledModel, ids: np.ndarray) -> None:
    (expected,) = run_paddle(saved, {"ids": ids})
    (got,) = model.run({"ids": ids}).values()
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def refused_by_paddle(saved: Saved, ids: np.ndarray) -> None:
    with pytest.raises(Exception, match="lookup_table_v2"):
        run_paddle(saved, {"ids": ids})


IN_RANGE: Sequence[tuple[int, int]] = [(1, 1), (2, POSITIONS), (3, 5), (0, POSITIONS + 3), (2, 0)]


@pytest.mark.parametrize("family", sorted(SHAPE_CHECKED))
def test_position_ids_need_no_guard_and_are_checked_on_the_sequence_length(family: str) -> None:
    saved, model = built(SHAPE_CHECKED[family])
    assert not node_types(model) & GUARD_NODES
    assert model.checks.index_checks == {}
    (shaped,) = model.checks.shape_checks
    assert shaped.top == Bound(-1, 1, ("ids", 1))  # S - 1, S the ids' dim 1
    for shape in IN_RANGE:  # the empty ones included: none outside, as Paddle
        answers_as_paddle(saved, model, np.ones(shape, np.int64))
    too_long = np.ones((2, POSITIONS + 1), np.int64)
    refused_by_paddle(saved, too_long)
    with pytest.raises(IndexOutOfRange) as info:
        model.run({"ids": too_long})
    assert str(info.value).endswith(f"expected Ids in [0, {POSITIONS}), got {POSITIONS}")


def test_a_refused_shape_is_refused_again_and_its_neighbours_still_answered() -> None:
    """A failing shape is not remembered as checked (the session's per-shape findings)."""
    saved, model = built(bert)
    for _ in range(2):
        with pytest.raises(IndexOutOfRange):
            model.run({"ids": np.zeros((1, POSITIONS + 1), np.int64)})
        answers_as_paddle(saved, model, np.zeros((1, POSITIONS), np.int64))


def test_token_type_zeros_need_no_check_at_all() -> None:
    def types_only() -> tuple[list[Any], list[Any]]:
        ids = paddle.static.data("ids", [-1, -1], "int64")
        return [ids], [paddle.nn.Embedding(2, 4)(paddle.zeros_like(ids))]

    saved, model = built(types_only)
    assert not node_types(model) & GUARD_NODES
    assert model.checks.shape_checks == () and model.checks.index_checks == {}
    answers_as_paddle(saved, model, np.ones((2, 3 * POSITIONS), np.int64))


def test_positions_the_data_decides_keep_their_guard() -> None:
    """Padded rows count no positions: a long padded request is Paddle's to answer, an
    unpadded one of the same shape to refuse; only the values tell them apart."""
    saved, model = built(roberta)
    assert node_types(model) >= GUARD_NODES
    assert model.checks.shape_checks == ()
    padded = np.ones((2, POSITIONS + 4), np.int64)
    answers_as_paddle(saved, model, padded)
    unpadded = np.zeros((2, POSITIONS), np.int64)
    refused_by_paddle(saved, unpadded)
    with pytest.raises(IndexOutOfRange):
        model.run({"ids": unpadded})


def test_the_portable_form_keeps_the_guard_for_runtimes_without_graphgates_checks() -> None:
    saved, _ = built(bert)
    portable = export(validate(saved.program, saved.params))
    assert {node.op_type for node in portable.graph.node} >= GUARD_NODES
    session = ort.InferenceSession(portable.SerializeToString(), providers=["CPUExecutionProvider"])
    ids = np.ones((2, POSITIONS), np.int64)
    (expected,) = run_paddle(saved, {"ids": ids})
    np.testing.assert_allclose(session.run(None, {"ids": ids})[0], expected, rtol=1e-5)
    with pytest.raises(Exception, match="Reshape"):
        session.run(None, {"ids": np.ones((2, POSITIONS + 1), np.int64)})
