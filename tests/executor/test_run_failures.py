"""Requests onnxruntime refuses: typed errors in Paddle's terms, never onnxruntime's own text,
nothing written to stderr; indices outside what Paddle accepts fail, never give a wrong number.

Indices are refused by graphgate's range guard (OnnxBuilder.guard_range), never by Gather's own
check, which onnxruntime's CUDA Gather does not have: these tests show on the CPU that the guard
is what fails, and that it fails with no Gather behind it."""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from executor import CompiledModel, SessionOptions, compile
from executor.errors import IndexCheck, IndexOutOfRange, RunFailed, run_failed
from executor.lower import IR_VERSION, ONNX_OPSET, OnnxBuilder
from graph_proto.types import DType
from tests.builders import FP32, GraphBuilder, V, weights
from validator import validate

INT32, INT64 = DType.INT32, DType.INT64
VOCAB = 5
W = weights(VOCAB, 3)


def compiled(g: GraphBuilder) -> CompiledModel:
    built = g.built()
    return compile(validate(built.program, built.params), SessionOptions(use_cuda=False))


def embedding(padding_idx: int = -1, ids_dtype: DType = INT64) -> CompiledModel:
    """lookup_table_v2 (op 1): rows of W[5, 3] at ids [-1]."""
    g = GraphBuilder()
    g.feed("ids", ids_dtype, [-1])
    g.param("w", W)
    g.node(
        "lookup_table_v2",
        {"W": ["w"], "Ids": ["ids"]},
        {"Out": [V("rows", [-1, 3])]},
        {"padding_idx": padding_idx},
    )
    g.fetch("rows")
    return compiled(g)


def taken(op_type: str, attrs: dict[str, int], width: int = 5) -> CompiledModel:
    """gather or index_select (op 2) of x [2, width] at index [-1] along axis 1."""
    g = GraphBuilder()
    g.feed("x", FP32, [2, width])
    g.feed("index", INT64, [-1])
    g.node(op_type, {"X": ["x"], "Index": ["index"]}, {"Out": [V("out", [2, -1])]}, attrs)
    g.fetch("out")
    return compiled(g)


def one_hot() -> CompiledModel:
    g = GraphBuilder()
    g.feed("x", INT64, [-1])
    g.node("one_hot_v2", {"X": ["x"]}, {"Out": [V("hot", [-1, 4])]}, {"depth": 4})
    g.fetch("hot")
    return compiled(g)


def squeezed() -> CompiledModel:
    """squeeze2 (op 1) of axis 1 of x [-1, -1]: only a size of 1 can be squeezed."""
    g = GraphBuilder()
    g.feed("x", FP32, [-1, -1])
    g.node(
        "squeeze2",
        {"X": ["x"]},
        {"Out": [V("y", [-1])], "XShape": [V("xshape", [0, -1, -1])]},
        {"axes": [1]},
    )
    g.fetch("y")
    return compiled(g)


INT32_MIN = int(np.iinfo(np.int32).min)


@pytest.mark.parametrize(
    ("ids", "dtype", "got"),
    [
        pytest.param([0, -1], INT64, "-1", id="minus-1"),  # ONNX Gather alone reads row 4
        pytest.param([3, -5], INT64, "-5", id="minus-vocab"),  # ... and row 0 here
        pytest.param([-6, 1], INT64, "-6", id="below-minus-vocab"),
        pytest.param([1, 5], INT64, "5", id="vocab"),
        pytest.param([2, 99], INT32, "99", id="int32"),
        pytest.param([INT32_MIN + 10], INT32, str(INT32_MIN + 10), id="int32-low"),
        pytest.param([INT32_MIN], INT32, str(INT32_MIN), id="int32-min"),
        pytest.param([3, 7, -2], INT64, "7", id="first-outside"),  # in the ids' order
    ],
)
def test_an_embedding_id_outside_the_vocabulary_fails(
    ids: list[int], dtype: DType, got: str
) -> None:
    model = embedding(ids_dtype=dtype)
    with pytest.raises(IndexOutOfRange) as info:
        model.run({"ids": np.array(ids, dtype.numpy)})
    assert str(info.value) == f"op 1 (lookup_table_v2): expected Ids in [0, 5), got {got}"
    assert info.value.code == "INDEX_OUT_OF_RANGE"
    assert isinstance(info.value, RunFailed)


def test_embedding_ids_in_range_read_their_rows_and_the_padding_row_reads_zeros() -> None:
    ids = np.array([4, 0, 2, 2, 3], np.int64)
    (rows,) = embedding(padding_idx=2).run({"ids": ids}).values()
    expected = W[ids]
    expected[ids == 2] = 0
    np.testing.assert_array_equal(rows, expected)


def test_the_padding_id_does_not_excuse_other_ids() -> None:
    with pytest.raises(IndexOutOfRange) as info:
        embedding(padding_idx=4).run({"ids": np.array([4, -1], np.int64)})
    assert str(info.value) == "op 1 (lookup_table_v2): expected Ids in [0, 5), got -1"


@pytest.mark.parametrize(
    ("op_type", "attrs"), [("gather", {"axis": 1}), ("index_select", {"dim": 1})]
)
def test_gather_and_index_select_wrap_negatives_and_refuse_what_is_outside(
    op_type: str, attrs: dict[str, int]
) -> None:
    model = taken(op_type, attrs)
    x = np.arange(10, dtype=np.float32).reshape(2, 5)
    index = np.array([-5, -1, 0, 4], np.int64)
    (out,) = model.run({"x": x, "index": index}).values()
    np.testing.assert_array_equal(out, x[:, index])  # Paddle 3 wraps them too
    for bad in (-6, 5):
        with pytest.raises(IndexOutOfRange) as info:
            model.run({"x": x, "index": np.array([0, bad], np.int64)})
        assert str(info.value) == f"op 2 ({op_type}): expected Index in [-5, 5), got {bad}"


@pytest.mark.parametrize("bad", [-1, -4, 4])
def test_a_one_hot_id_outside_the_depth_fails(bad: int) -> None:
    with pytest.raises(IndexOutOfRange) as info:
        one_hot().run({"x": np.array([0, bad], np.int64)})
    assert str(info.value) == f"op 1 (one_hot_v2): expected X in [0, 4), got {bad}"


def test_another_run_failure_names_the_op_not_onnxruntime_internals() -> None:
    model = squeezed()
    assert model.run({"x": np.ones((2, 1), np.float32)})["y"].shape == (2,)
    with pytest.raises(RunFailed) as info:
        model.run({"x": np.ones((2, 3), np.float32)})
    assert type(info.value) is RunFailed
    assert str(info.value) == "op 1 (squeeze2) could not run on these inputs"


def test_a_failed_run_writes_nothing_to_stderr_and_logs_onnxruntime_text_at_debug(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    model = embedding()
    capfd.readouterr()
    with (
        caplog.at_level(logging.DEBUG, logger="graphgate.executor"),
        pytest.raises(IndexOutOfRange),
    ):
        model.run({"ids": np.array([7], np.int64)})
    assert capfd.readouterr() == ("", "")  # onnxruntime logs to the process's fd 2 itself
    (record,) = [r for r in caplog.records if r.name == "graphgate.executor"]
    assert record.levelno == logging.DEBUG
    assert "1_lookup_table_v2/node_Reshape" in record.getMessage()  # the raw text, for debugging


def test_gather_along_a_dim_known_at_run_time_names_its_size() -> None:
    model = taken("gather", {"axis": 1}, width=-1)
    x = np.arange(14, dtype=np.float32).reshape(2, 7)
    np.testing.assert_array_equal(
        model.run({"x": x, "index": np.array([-7, 6], np.int64)})["out"], x[:, [-7, 6]]
    )
    with pytest.raises(IndexOutOfRange) as info:
        model.run({"x": x, "index": np.array([0, 7], np.int64)})
    assert str(info.value) == "op 2 (gather): expected Index in [-7, 7), got 7"


def test_ids_computed_in_the_program_are_refused_with_the_range_only() -> None:
    """cast (op 1) makes the ids: their values are not a feed, the range still is known."""
    g = GraphBuilder()
    g.feed("f", FP32, [-1])
    g.param("w", W)
    g.node("cast", {"X": ["f"]}, {"Out": [V("ids", [-1], INT64)]}, {"in_dtype": 5, "out_dtype": 3})
    g.node("lookup_table_v2", {"W": ["w"], "Ids": ["ids"]}, {"Out": [V("rows", [-1, 3])]}, {})
    g.fetch("rows")
    model = compiled(g)
    np.testing.assert_array_equal(model.run({"f": np.array([4, 1], np.float32)})["rows"], W[[4, 1]])
    with pytest.raises(IndexOutOfRange) as info:
        model.run({"f": np.array([1, 5], np.float32)})
    assert str(info.value) == "op 2 (lookup_table_v2): expected Ids in [0, 5), got one outside"


@pytest.mark.parametrize(
    "model",
    [
        pytest.param(embedding, id="lookup_table_v2"),
        pytest.param(lambda: taken("gather", {"axis": 1}), id="gather"),
        pytest.param(lambda: taken("index_select", {"dim": 1}), id="index_select"),
        pytest.param(one_hot, id="one_hot_v2"),
    ],
)
def test_every_index_reaches_its_consumer_through_a_guard_reshape(
    model: Callable[[], CompiledModel],
) -> None:
    """The node a failure is explained by is the guard's Reshape; the fed indices are read only
    by the guard, and what uses them (Gather, or one_hot's Unsqueeze then Equal) reads its output."""
    compiled_model = model()
    graph = onnx.load_from_string(compiled_model.onnx_bytes).graph
    ((name, check),) = compiled_model.index_checks.items()
    (guard,) = [n for n in graph.node if n.name == name]
    assert guard.op_type == "Reshape"
    readers = [n for n in graph.node if check.indices in n.input]
    assert sorted(n.op_type for n in readers) == ["ReduceMax", "ReduceMin", "Reshape", "Shape"]
    assert guard in readers
    users = [n.op_type for n in graph.node if guard.output[0] in n.input]
    assert users == (["Unsqueeze"] if check.slot == "X" else ["Gather"])


def guard_model(rank: int, low: int, high: int) -> tuple[ort.InferenceSession, dict[str, object]]:
    """ids (int64, the given rank) through guard_range([low, high)) into an Identity: no Gather."""
    b = OnnxBuilder()
    check = IndexCheck("Ids", "ids", high)
    guarded = b.guard_range("ids", rank, b.scalar(low, INT64), b.scalar(high, INT64), check)
    b.nodes.append(helper.make_node("Identity", [guarded], ["out"], name="out"))
    ids_type = helper.make_tensor_value_info("ids", onnx.TensorProto.INT64, [None] * rank)
    out_type = helper.make_tensor_value_info("out", onnx.TensorProto.INT64, [None] * rank)
    graph = helper.make_graph(b.nodes, "guard", [ids_type], [out_type], b.initializers)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", ONNX_OPSET)], ir_version=IR_VERSION
    )
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session, dict(b.index_checks)


def guarded(session: ort.InferenceSession, ids: np.ndarray) -> np.ndarray | str:
    """The guard's output, or onnxruntime's failure text."""
    options = ort.RunOptions()
    options.log_severity_level = 4
    try:
        (out,) = session.run(None, {"ids": ids}, options)
    except ort.capi.onnxruntime_pybind11_state.Fail as e:
        return str(e)
    return np.asarray(out)


@pytest.mark.parametrize(
    "ids",
    [
        pytest.param([[0, 4], [2, 3]], id="inside"),
        pytest.param(np.zeros((0, 3)), id="empty"),
        pytest.param(np.zeros((3, 0)), id="empty-last-dim"),
    ],
)
def test_the_guard_passes_indices_inside_through(ids: object) -> None:
    session, _ = guard_model(2, 0, 5)
    fed = np.asarray(ids, np.int64)
    out = guarded(session, fed)
    assert isinstance(out, np.ndarray) and out.shape == fed.shape
    np.testing.assert_array_equal(out, fed)


@pytest.mark.parametrize(
    "ids",
    [
        pytest.param([[0, 5], [2, 3]], id="high"),
        pytest.param([[0, 4], [-1, 3]], id="low"),
        pytest.param([[np.iinfo(np.int64).min]], id="int64-min"),
        pytest.param([[np.iinfo(np.int64).max, 0]], id="int64-max"),
    ],
)
def test_the_guard_alone_fails_the_run_at_its_reshape(ids: object) -> None:
    """No Gather in this graph: the failure is the guard's."""
    session, checks = guard_model(2, 0, 5)
    failure = guarded(session, np.asarray(ids, np.int64))
    (guard,) = checks
    assert isinstance(failure, str) and f"running Reshape node. Name:'{guard}'" in failure


@pytest.mark.parametrize(("value", "inside"), [(3, True), (-4, True), (4, False), (-5, False)])
def test_the_guard_of_a_0d_index_keeps_it_0d(value: int, inside: bool) -> None:
    session, checks = guard_model(0, -4, 4)
    out = guarded(session, np.array(value, np.int64))
    if inside:
        assert isinstance(out, np.ndarray) and out.shape == () and int(out) == value
    else:
        (guard,) = checks
        assert isinstance(out, str) and f"Name:'{guard}'" in out


def test_a_guard_failure_is_explained_from_the_node_name_alone() -> None:
    """Every provider's failure text names the node; nothing else of it is read."""
    check = IndexCheck("Ids", "ids", ("w", 0))
    text = "Non-zero status code returned while running Reshape node. Name:'3_lookup_table_v2/g_9'"
    error = run_failed(
        text, {"3_lookup_table_v2/g_9": check}, {"ids": np.array([2, 9])}, {"w": (8, 4)}
    )
    assert str(error) == "op 3 (lookup_table_v2): expected Ids in [0, 8), got 9"
    unknown = run_failed(text, {"3_lookup_table_v2/g_9": check}, {}, {})
    assert str(unknown) == (
        "op 3 (lookup_table_v2): expected Ids in [0, n) where n is the size of the indexed dim, "
        "got one outside"
    )
