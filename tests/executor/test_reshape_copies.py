"""reshape2 with a constant shape whose 0s copy X's dims (the transformer's head split and merge):
lowered without the run-time empty-tensor chain, and still equal to Paddle on empty inputs.

Two forms: the portable one (`lower`, what `graphgate convert` writes) computes Paddle's rule
for an empty X in the graph; the served one (`prepare`, a lean lowering) takes X as non-empty,
and the session answers a request that makes X empty without running the graph."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import onnx
import pytest

# Imported first: paddle_util switches Paddle to legacy programs before importing it.
pytest.importorskip("tests.conformance.paddle_util")

from executor.convert import NONEMPTY_KEY, lower, portable
from executor.errors import IncompatibleInputs
from executor.session import SessionOptions, compile, prepare
from tests.conformance.paddle_util import (
    assert_parity,
    building,
    op_types,
    paddle,
    run_paddle,
    save,
)
from validator import validate

pytestmark = pytest.mark.paddle

# name: (X's declared dims, target shape, X shapes fed: empty ones included)
CASES: dict[str, tuple[list[int], list[int], list[tuple[int, ...]]]] = {
    "split_heads": ([-1, -1, 8], [0, 0, 2, 4], [(2, 3, 8), (0, 3, 8), (2, 0, 8), (1, 1, 8)]),
    "merge_heads": ([-1, -1, 2, 4], [0, 0, 8], [(2, 3, 2, 4), (0, 3, 2, 4), (3, 0, 2, 4)]),
    "batch_only_unknown": ([-1, 3, 8], [0, 0, 2, 4], [(2, 3, 8), (0, 3, 8)]),
    "copy_only_the_unknown": ([-1, 3, 8], [0, 6, 4], [(2, 3, 8), (0, 3, 8)]),
    "copy_behind_a_constant": ([-1, 3, -1], [0, 3, 0, 1], [(2, 3, 4), (0, 3, 4), (2, 3, 0)]),
    "copy_and_infer": ([-1, -1, 4], [0, -1], [(2, 3, 4), (1, 5, 4)]),  # no -1 for an empty X
}


def _saved(dims: list[int], shape: list[int]) -> Any:
    with building() as (main, startup):
        x = paddle.static.data("x", dims, "float32")
        out = paddle.reshape(x, shape)
    saved = save(main, startup, [x], [out])
    assert "reshape2" in op_types(saved.program)
    return saved


@pytest.mark.parametrize(("dims", "shape", "fed"), CASES.values(), ids=list(CASES))
def test_copied_dims_match_paddle_on_empty_and_non_empty_inputs(
    dims: list[int], shape: list[int], fed: list[tuple[int, ...]]
) -> None:
    saved = _saved(dims, shape)
    rng = np.random.default_rng(0)
    for x_shape in fed:
        assert_parity(saved, {"x": rng.standard_normal(x_shape).astype(np.float32)})


@pytest.mark.parametrize(("dims", "shape", "fed"), CASES.values(), ids=list(CASES))
def test_the_portable_form_computes_paddles_rule_for_an_empty_x(
    dims: list[int], shape: list[int], fed: list[tuple[int, ...]]
) -> None:
    """The graph `graphgate convert` writes, run as any runtime would, on the same inputs."""
    import onnxruntime as ort

    saved = _saved(dims, shape)
    model = portable(lower(validate(saved.program, saved.params)))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for x_shape in fed:
        feeds = {"x": rng.standard_normal(x_shape).astype(np.float32)}
        (ours,) = session.run(None, feeds)
        (theirs,) = run_paddle(saved, feeds)
        assert ours.shape == theirs.shape
        np.testing.assert_array_equal(ours, theirs)


def test_the_served_form_takes_x_as_non_empty_and_says_so() -> None:
    """A constant target ONNX copies from (no node computing it), X recorded as taken
    non-empty in the session's checks and the model's metadata."""
    dims, shape, _ = CASES["split_heads"]
    saved = _saved(dims, shape)
    prepared = prepare(validate(saved.program, saved.params))
    model = onnx.load_from_string(prepared.model_bytes)
    counts = Counter(node.op_type for node in model.graph.node)
    assert counts == Counter({"Reshape": 1, "Identity": 1})  # Identity: the fetch
    (reshape,) = [node for node in model.graph.node if node.op_type == "Reshape"]
    assert onnx.helper.get_attribute_value(reshape.attribute[0]) == 0  # allowzero
    assert prepared.checks.nonempty == ("x",)
    assert {p.key: p.value for p in model.metadata_props}[NONEMPTY_KEY] == "x"


def test_the_served_head_split_and_merge_keep_the_symbols_of_xs_dims() -> None:
    """What the lean form is for: ONNX's shape inference follows a constant target, so the
    merged heads carry X's own symbolic dims (onnxruntime fuses the residual Add and
    LayerNormalization only when both inputs carry the same ones)."""
    with building() as (main, startup):
        x = paddle.static.data("x", [-1, -1, 8], "float32")
        heads = paddle.transpose(paddle.reshape(x, [0, 0, 2, 4]), [0, 2, 1, 3])
        merged = paddle.reshape(paddle.transpose(heads, [0, 2, 1, 3]), [0, 0, 8])
        out = x + merged
    saved = save(main, startup, [x], [out])
    model = onnx.load_from_string(prepare(validate(saved.program, saved.params)).model_bytes)
    graph = onnx.shape_inference.infer_shapes(model).graph
    dims = {
        info.name: [d.dim_param or d.dim_value for d in info.type.tensor_type.shape.dim]
        for info in [*graph.input, *graph.value_info]
    }
    (add,) = [node for node in graph.node if node.op_type == "Add"]
    assert dims[add.input[0]] == dims[add.input[1]] == dims["x"]
    rng = np.random.default_rng(2)
    for x_shape in ((2, 3, 8), (1, 5, 8)):
        assert_parity(saved, {"x": rng.standard_normal(x_shape).astype(np.float32)})
    # An empty x: Paddle's merged heads are [0, 0, 8], which x + merged cannot broadcast
    # with [0, 3, 8]; refused before anything runs, as Paddle refuses it.
    served = compile(validate(saved.program, saved.params), SessionOptions(use_cuda=False))
    with pytest.raises(IncompatibleInputs, match="cannot broadcast"):
        served.run({"x": np.zeros((0, 3, 8), np.float32)})


def test_an_output_an_empty_x_leaves_holding_values_is_refused() -> None:
    """shape(x) holds values while x is empty: the lean graph cannot be run on such an x, and
    its other fetch would have another empty shape than Paddle's. Refused, saying why; the
    same program answers as Paddle does otherwise."""
    with building() as (main, startup):
        x = paddle.static.data("x", [-1, -1, 8], "float32")
        heads = paddle.reshape(x, [0, 0, 2, 4])
        size = paddle.shape(x)
    saved = save(main, startup, [x], [heads, size])
    model = compile(validate(saved.program, saved.params), SessionOptions(use_cuda=False))
    empty = {"x": np.zeros((0, 3, 8), np.float32)}
    with pytest.raises(IncompatibleInputs, match=r"make 'x' empty \(\[0, 3, 8\]\)"):
        model.run(empty)
    with pytest.raises(IncompatibleInputs):  # the second time too, from the request's key
        model.run(empty)
    rng = np.random.default_rng(3)
    assert_parity(saved, {"x": rng.standard_normal((2, 3, 8)).astype(np.float32)})


@pytest.mark.parametrize(
    ("name", "helpers"),
    [
        ("split_heads", {"Shape": 1, "Size": 1, "Min": 1, "Concat": 1}),
        ("copy_behind_a_constant", {"Shape": 1, "Size": 1, "Min": 1, "Where": 1, "Concat": 1}),
    ],
)
def test_the_target_is_computed_from_the_copied_prefix_only(
    name: str, helpers: dict[str, int]
) -> None:
    dims, shape, _ = CASES[name]
    saved = _saved(dims, shape)
    model = lower(validate(saved.program, saved.params)).model
    counts = Counter(node.op_type for node in model.graph.node)
    assert counts == Counter({"Reshape": 1, "Identity": 1, **helpers})  # Identity: the fetch
    (reshape,) = [node for node in model.graph.node if node.op_type == "Reshape"]
    assert onnx.helper.get_attribute_value(reshape.attribute[0]) == 1  # allowzero


def test_onnx_copies_the_dim_itself_when_only_the_copied_dim_can_make_x_empty() -> None:
    """An empty X has its 0 in the one copied dim that can be 0: ONNX's allowzero=0 copy is
    Paddle's, with the constant target and no node computing it (parity: the test above).
    Not so in batch_only_unknown, where X [0, 3, 8] gives Paddle [0, 0, 2, 4]."""
    dims, shape, _ = CASES["copy_only_the_unknown"]
    saved = _saved(dims, shape)
    model = lower(validate(saved.program, saved.params)).model
    counts = Counter(node.op_type for node in model.graph.node)
    assert counts == Counter({"Reshape": 1, "Identity": 1})  # Identity: the fetch
    (reshape,) = [node for node in model.graph.node if node.op_type == "Reshape"]
    assert onnx.helper.get_attribute_value(reshape.attribute[0]) == 0  # allowzero
    (target,) = [t for t in model.graph.initializer if t.name == reshape.input[1]]
    assert onnx.numpy_helper.to_array(target).tolist() == shape


# X's declared dims, flatten's start and stop axes, X shapes fed (empty ones included)
FLATTEN_CASES: dict[str, tuple[list[int], int, int, list[tuple[int, ...]]]] = {
    "batch_into_tokens": ([-1, 3, 4], 0, 1, [(2, 3, 4), (0, 3, 4)]),
    "two_unknown_merged": ([-1, -1, 4], 0, 1, [(2, 5, 4), (0, 5, 4), (2, 0, 4)]),
    "unknown_in_the_middle": ([2, -1, 5], 1, 2, [(2, 3, 5), (2, 0, 5)]),
    "unknown_outside": ([-1, 3, 4], 1, 2, [(2, 3, 4), (0, 3, 4)]),
}


@pytest.mark.parametrize(
    ("dims", "start", "stop", "fed"), FLATTEN_CASES.values(), ids=list(FLATTEN_CASES)
)
def test_flatten_over_unknown_dims_matches_paddle_on_empty_and_non_empty_inputs(
    dims: list[int], start: int, stop: int, fed: list[tuple[int, ...]]
) -> None:
    with building() as (main, startup):
        x = paddle.static.data("x", dims, "float32")
        out = paddle.flatten(x, start, stop)
    saved = save(main, startup, [x], [out])
    assert "flatten_contiguous_range" in op_types(saved.program)
    rng = np.random.default_rng(0)
    for x_shape in fed:
        assert_parity(saved, {"x": rng.standard_normal(x_shape).astype(np.float32)})


def test_flatten_with_only_the_merged_dims_unknown_has_a_constant_target() -> None:
    dims, start, stop, _ = FLATTEN_CASES["two_unknown_merged"]
    with building() as (main, startup):
        x = paddle.static.data("x", dims, "float32")
        out = paddle.flatten(x, start, stop)
    saved = save(main, startup, [x], [out])
    model = lower(validate(saved.program, saved.params)).model
    counts = Counter(node.op_type for node in model.graph.node)
    assert counts == Counter({"Reshape": 1, "Identity": 1})  # Identity: the fetch


def test_a_shape_tensor_target_copies_like_paddle_on_empty_inputs() -> None:
    """reshape(x, shape(y)): every element of the target is known at run time only, so each
    may be a 0 that copies X's dim (0 when X is empty)."""
    with building() as (main, startup):
        x = paddle.static.data("x", [-1, 3, 8], "float32")
        y = paddle.static.data("y", [-1, 3, 8], "float32")
        out = paddle.reshape(x, paddle.shape(y))
    saved = save(main, startup, [x, y], [out])
    rng = np.random.default_rng(1)
    for x_rows, y_rows in [(2, 2), (0, 0), (2, 0)]:
        feeds = {
            "x": rng.standard_normal((x_rows, 3, 8)).astype(np.float32),
            "y": rng.standard_normal((y_rows, 3, 8)).astype(np.float32),
        }
        assert_parity(saved, feeds)


def _channel_shuffle(x: Any) -> Any:
    """PaddleClas' channel shuffle: the batch read from the tensor's shape, the rest constants."""
    batch = paddle.shape(x)[0]
    y = paddle.reshape(x, [batch, 2, 3, 4, 4])
    y = paddle.transpose(y, [0, 2, 1, 3, 4])
    return paddle.reshape(y, [batch, 6, 4, 4])


def _head_split_of_other_dims(x: Any) -> Any:
    """A size read from dim 1 put at index 0: not X's own dim there, so computed at run time."""
    return paddle.reshape(x, [paddle.shape(x)[1], -1])


def _shape_list_program(fn: Any, dims: list[int]) -> Any:
    with building() as (main, startup):
        x = paddle.static.data("x", dims, "float32")
        out = fn(x)
    return save(main, startup, [x], [out])


def test_a_shape_list_of_xs_own_dims_is_a_constant_target_and_matches_paddle() -> None:
    saved = _shape_list_program(_channel_shuffle, [-1, 6, 4, 4])
    graph = lower(validate(saved.program, saved.params)).model.graph
    constants = {i.name for i in graph.initializer}
    reshapes = [n for n in graph.node if n.op_type == "Reshape"]
    assert len(reshapes) == 2 and all(n.input[1] in constants for n in reshapes)
    nodes = Counter(n.op_type for n in graph.node)
    assert not nodes.keys() & {"Shape", "Where", "Min", "Size", "Concat"}
    rng = np.random.default_rng(0)
    for rows in (3, 1, 0):  # an empty batch too: ONNX's 0 copies it as Paddle reads it
        assert_parity(saved, {"x": rng.standard_normal((rows, 6, 4, 4)).astype(np.float32)})


def test_a_size_read_from_another_dim_stays_a_run_time_target() -> None:
    saved = _shape_list_program(_head_split_of_other_dims, [-1, -1, 4])
    graph = lower(validate(saved.program, saved.params)).model.graph
    constants = {i.name for i in graph.initializer}
    (reshape,) = [n for n in graph.node if n.op_type == "Reshape" and n.input[0] == "x"]
    assert reshape.input[1] not in constants
    rng = np.random.default_rng(1)
    for x_shape in ((2, 3, 4), (5, 1, 4)):
        assert_parity(saved, {"x": rng.standard_normal(x_shape).astype(np.float32)})
