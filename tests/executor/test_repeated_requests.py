"""A model's requests repeat their feed names, dtypes and shapes, and CompiledModel.run checks
such a request once in full, then only what can differ (executor/session.py `_request_key`).
These tests show that nothing a full check refuses gets through the second time: what depends
on feed values is checked on every request, and any other dtype, shape, name set or layout is
checked in full again."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from executor import CompiledModel, SessionOptions, compile
from executor.errors import (
    IndexOutOfRange,
    MissingInput,
    TensorTooLarge,
    UnexpectedInput,
    WrongDType,
    WrongShape,
)
from tests.support.builders import FP32, GraphBuilder, V, arange_of_feed, embedding, mlp, weights
from validator import DEFAULT_POLICY, Policy, validate

W = weights(5, 3)


def _compiled(g: GraphBuilder, policy: Policy = DEFAULT_POLICY) -> CompiledModel:
    built = g.built()
    return compile(validate(built.program, built.params, policy), SessionOptions(use_cuda=False))


def test_ids_are_checked_on_every_request_of_the_same_shape() -> None:
    model = _compiled(embedding(W))
    good = np.array([4, 0, 2], np.int64)
    for _ in range(2):  # the second run takes what the first one's checks found
        np.testing.assert_array_equal(model.run({"ids": good})["rows"], W[good])
    with pytest.raises(IndexOutOfRange, match=r"expected Ids in \[0, 5\), got 7"):
        model.run({"ids": np.array([4, 7, 2], np.int64)})
    np.testing.assert_array_equal(model.run({"ids": good})["rows"], W[good])


def test_another_dtype_name_set_or_fixed_dim_is_refused_after_a_good_request() -> None:
    model = _compiled(mlp((16, 8)))
    x = np.ones((2, 16), np.float32)
    model.run({"x": x})
    with pytest.raises(WrongDType):
        model.run({"x": x.astype(np.float64)})
    with pytest.raises(WrongShape, match="axis 1 must be 16"):
        model.run({"x": np.ones((2, 15), np.float32)})
    with pytest.raises(UnexpectedInput):
        model.run({"x": x, "y": x})
    with pytest.raises(MissingInput):
        model.run({"y": x})
    model.run({"x": x})  # and the first kind of request still runs
    with pytest.raises(WrongShape):  # refused requests are refused every time
        model.run({"x": np.ones((2, 15), np.float32)})


def test_a_strided_or_fortran_feed_answers_as_its_contiguous_copy_does() -> None:
    model = _compiled(mlp((16, 8)))
    x = np.random.default_rng(0).standard_normal((3, 32)).astype(np.float32)
    strided = x[:, ::2]
    assert not strided.flags.c_contiguous
    want = model.run({"x": np.ascontiguousarray(strided)})["probs"]
    np.testing.assert_allclose(model.run({"x": strided})["probs"], want, rtol=1e-6)
    fortran = np.asfortranarray(strided)
    np.testing.assert_allclose(model.run({"x": fortran})["probs"], want, rtol=1e-6)


def test_sizes_read_from_feed_values_are_checked_on_every_request() -> None:
    policy = replace(DEFAULT_POLICY, max_tensor_bytes=8 * 100, max_dynamic_dim=100)
    model = _compiled(arange_of_feed(), policy)
    np.testing.assert_array_equal(model.run({"n": np.array([5])})["o"], np.arange(5))
    np.testing.assert_array_equal(model.run({"n": np.array([7])})["o"], np.arange(7))
    with pytest.raises(TensorTooLarge, match=r"expected at most 800 bytes"):
        model.run({"n": np.array([10**9])})  # the same name, dtype and shape as the good ones


def test_the_shapes_each_request_is_told_before_its_run_are_its_own() -> None:
    model = _compiled(mlp((16, 8)))
    told: list[dict[str, tuple[int, ...]]] = []
    for rows in (1, 4, 1, 4):
        model.run({"x": np.ones((rows, 16), np.float32)}, before_run=lambda s: told.append(dict(s)))
    assert told == [{"probs": (rows, 8)} for rows in (1, 4, 1, 4)]


def test_what_it_remembers_stays_bounded() -> None:
    g = GraphBuilder()
    g.feed("x", FP32, [-1, 4])
    g.param("w", weights(4, 2))
    g.node("matmul_v2", {"X": ["x"], "Y": ["w"]}, {"Out": [V("y", [-1, 2])]}, {})
    g.fetch("y")
    model = _compiled(g)
    for rows in range(1, 400):
        assert model.run({"x": np.ones((rows, 4), np.float32)})["y"].shape == (rows, 2)
    assert len(model._checked) <= 256
