"""Run-time checks of each request (its Scope): typed errors with whole messages, 0-D values,
outputs by Paddle var name, and nothing that outlives a request."""

from __future__ import annotations

import numpy as np
import pytest

from executor import CompiledModel, SessionOptions, compile
from executor.errors import (
    ExecutionError,
    IncompatibleInputs,
    InputTooLarge,
    MissingInput,
    RunFailed,
    UnexpectedInput,
    WrongDType,
    WrongRank,
    WrongShape,
)
from graph_proto.types import DType
from tests.support.builders import FP32, GraphBuilder, V, affine, mlp, weights
from validator import validate

INT64 = DType.INT64


def compiled(g: GraphBuilder, max_request_bytes: int | None = None) -> CompiledModel:
    built = g.built()
    options = SessionOptions(use_cuda=False)
    if max_request_bytes is not None:
        options = SessionOptions(use_cuda=False, max_request_bytes=max_request_bytes)
    return compile(validate(built.program, built.params), options)


def ones(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return np.ones(shape, dtype)


def two_feeds_added() -> GraphBuilder:
    """s = a + b over two feeds [-1, 4]: their batch dims must agree at run time."""
    g = GraphBuilder()
    g.feed("a", FP32, [-1, 4])
    g.feed("b", FP32, [-1, 4])
    g.node("elementwise_add", {"X": ["a"], "Y": ["b"]}, {"Out": [V("s", [-1, 4])]}, {"axis": -1})
    g.fetch("s")
    return g


def embedding(vocabulary: int = 5) -> GraphBuilder:
    """lookup_table_v2: rows of w[vocabulary, 3] at int64 ids [-1]."""
    g = GraphBuilder()
    g.feed("ids", INT64, [-1])
    g.param("w", weights(vocabulary, 3))
    g.node(
        "lookup_table_v2",
        {"W": ["w"], "Ids": ["ids"]},
        {"Out": [V("rows", [-1, 3])]},
        {"padding_idx": -1},
    )
    g.fetch("rows")
    return g


def gather() -> GraphBuilder:
    g = GraphBuilder()
    g.feed("x", FP32, [-1, 3])
    g.feed("index", INT64, [-1])
    g.node("gather", {"X": ["x"], "Index": ["index"]}, {"Out": [V("rows", [-1, 3])]}, {"axis": 0})
    g.fetch("rows")
    return g


BAD_REQUESTS = [
    pytest.param(
        {"a": ones(2, 4), "b": ones(2, 4, dtype=np.float64)},
        WrongDType,
        "input 'b': expected float32, got float64",
        id="dtype",
    ),
    pytest.param(
        {"a": ones(2, 4), "b": ones(2, 4, 1)},
        WrongRank,
        "input 'b': expected rank 2 (dims [-1, 4]), got rank 3 (shape [2, 4, 1])",
        id="rank",
    ),
    pytest.param(
        {"a": ones(2, 5), "b": ones(2, 4)},
        WrongShape,
        "input 'a': expected dims [-1, 4], got [2, 5] (axis 1 must be 4)",
        id="fixed-dim",
    ),
    pytest.param(
        {"a": ones(2, 4), "b": ones(3, 4)},
        IncompatibleInputs,
        "the inputs do not fit the program: op 2 (elementwise_add): cannot broadcast [2, 4] "
        "with [3, 4]: expected dims that are equal or 1, got 2 and 3",
        id="inconsistent-batch",
    ),
    pytest.param(
        {"a": ones(2, 4)},
        MissingInput,
        "expected inputs ['a', 'b'], got ['a']: missing ['b']",
        id="missing",
    ),
    pytest.param(
        {"b": ones(2, 4), "a": ones(2, 4), "c": ones(2, 4)},
        UnexpectedInput,
        "expected inputs ['a', 'b'], got ['a', 'b', 'c']: unknown ['c']",
        id="extra",
    ),
    pytest.param(
        {"a": [[1.0] * 4] * 2, "b": ones(2, 4)},
        WrongDType,
        "input 'a': expected float32, got float64",
        id="list-is-float64",
    ),
]


@pytest.mark.parametrize(("feeds", "error", "message"), BAD_REQUESTS)
def test_a_bad_request_is_a_typed_error(
    feeds: dict[str, np.ndarray], error: type[ExecutionError], message: str
) -> None:
    with pytest.raises(error) as info:
        compiled(two_feeds_added()).run(feeds)
    assert str(info.value) == message
    assert isinstance(info.value, ExecutionError)


def test_feeds_over_the_byte_cap_are_refused() -> None:
    model = compiled(two_feeds_added(), max_request_bytes=100)
    assert model.run({"a": ones(3, 4), "b": ones(3, 4)})["s"].shape == (3, 4)  # 96 bytes
    with pytest.raises(InputTooLarge) as info:
        model.run({"a": ones(4, 4), "b": ones(4, 4)})  # 128 bytes
    assert str(info.value) == "expected at most 100 input bytes, got 128"
    with pytest.raises(InputTooLarge) as info:
        model.run({"a": ones(40, 4), "b": ones(40, 4)})  # over the cap from the first feed on
    assert str(info.value) == "expected at most 100 input bytes, got 1280"


@pytest.mark.parametrize(
    ("program", "feeds", "message"),
    [
        pytest.param(
            embedding,
            {"ids": np.array([0, 7])},
            "op 1 (lookup_table_v2): expected Ids in [0, 5), got 7",
            id="lookup_table_v2",
        ),
        pytest.param(
            gather,
            {"x": ones(2, 3), "index": np.array([1, 5])},
            "op 2 (gather): expected Index in [-2, 2), got 5",
            id="gather",
        ),
    ],
)
def test_an_index_out_of_range_is_run_failed_not_an_onnxruntime_error(
    program: type[GraphBuilder], feeds: dict[str, np.ndarray], message: str
) -> None:
    model = compiled(program())
    with pytest.raises(RunFailed) as info:
        model.run(feeds)
    assert str(info.value) == message
    # Raised `from None`: the onnxruntime exception is neither the cause nor shown as context.
    assert info.value.__cause__ is None
    assert info.value.__suppress_context__


def test_0d_feeds_and_outputs_stay_0d() -> None:
    g = GraphBuilder()
    g.feed("x", FP32, [])
    g.feed("v", FP32, [-1, 4])
    g.node(
        "scale",
        {"X": ["x"]},
        {"Out": [V("y", [])]},
        {"scale": 2.0, "bias": 1.0, "bias_after_scale": True},
    )
    g.node("reduce_sum", {"X": ["v"]}, {"Out": [V("total", [])]}, {"reduce_all": True})
    g.fetch("y")
    g.fetch("total")
    model = compiled(g)

    out = model.run({"x": np.array(3.0, np.float32), "v": ones(2, 4)})

    assert (out["y"].shape, out["y"].dtype, out["y"].item()) == ((), np.dtype(np.float32), 7.0)
    assert (out["total"].shape, out["total"].dtype, out["total"].item()) == (
        (),
        np.dtype(np.float32),
        8.0,
    )
    with pytest.raises(WrongRank) as info:
        model.run({"x": np.array([3.0], np.float32), "v": ones(2, 4)})
    assert str(info.value) == "input 'x': expected rank 0 (dims []), got rank 1 (shape [1])"


def test_outputs_are_returned_by_paddle_var_name_in_fetch_order() -> None:
    g = mlp((4, 6, 3))
    g.fetch("fc0.relu")
    out = compiled(g).run({"x": ones(2, 4)})
    assert [(name, value.shape) for name, value in out.items()] == [
        ("probs", (2, 3)),
        ("fc0.relu", (2, 6)),
    ]


def test_requests_with_different_batch_sizes_in_a_row_both_work() -> None:
    model = compiled(affine())
    x = np.random.default_rng(0).standard_normal((7, 4)).astype(np.float32)
    scale, bias = model.program.params["scale"], model.program.params["bias"]
    for batch in (2, 7, 1, 2):
        y = model.run({"x": x[:batch]})["y"]
        np.testing.assert_array_equal(y, x[:batch] * scale + bias)


@pytest.mark.parametrize(
    "bad",
    [
        {"ids": np.array([1, 9])},  # fails inside onnxruntime
        {"ids": np.array([1, 2], np.int32)},  # fails in the Scope
        {"ids": np.array([[1, 2]])},
        {},
    ],
    ids=["run-failed", "dtype", "rank", "missing"],
)
def test_a_failed_request_does_not_affect_the_next(bad: dict[str, np.ndarray]) -> None:
    model = compiled(embedding())
    ids = np.array([4, 0, 3])
    before = model.run({"ids": ids})["rows"]

    with pytest.raises(ExecutionError):
        model.run(bad)

    after = model.run({"ids": ids})
    np.testing.assert_array_equal(after["rows"], before)
    np.testing.assert_array_equal(before, model.program.params["w"][ids])


def test_a_request_never_sees_anothers_values() -> None:
    """Returned arrays are the caller's: changing one changes no later result, and the feeds
    themselves are left as they were."""
    model = compiled(mlp())
    x = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
    kept = x.copy()
    first = model.run({"x": x})["probs"]
    expected = first.copy()
    first[:] = 0

    np.testing.assert_array_equal(model.run({"x": x})["probs"], expected)
    np.testing.assert_array_equal(x, kept)
