"""Requests onnxruntime refuses: typed errors in Paddle's terms, never onnxruntime's own text,
nothing written to stderr; indices outside what Paddle accepts fail, never give a wrong number.

Indices are refused by graphgate, never by Gather's own check, which onnxruntime's CUDA Gather
does not have: fed indices by the session on the host before the run (a HostIndexCheck, no guard
in the graph), computed ones and those in a sub-block by a range guard in the graph
(OnnxBuilder.guard_range). These tests show on the CPU that graphgate's check is what fails, and
that the guard fails with no Gather behind it."""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from executor import CompiledModel, SessionOptions, compile
from executor.errors import IndexOutOfRange, RunFailed
from executor.lower import IR_VERSION, ONNX_OPSET, OnnxBuilder
from executor.runtime_checks import HostIndexCheck, IndexCheck, RuntimeChecks
from graph_proto import framework_pb2 as pb
from graph_proto.builder import Attr
from graph_proto.types import DType
from tests.support.builders import FP32, GraphBuilder, V, weights
from tests.support.builders import embedding as embedding_table
from validator import validate

INT32, INT64 = DType.INT32, DType.INT64
VOCAB = 5
W = weights(VOCAB, 3)


def compiled(g: GraphBuilder) -> CompiledModel:
    built = g.built()
    return compile(validate(built.program, built.params), SessionOptions(use_cuda=False))


def embedding(padding_idx: int = -1, ids_dtype: DType = INT64) -> CompiledModel:
    """lookup_table_v2 (op 1): rows of W[5, 3] at ids [-1]."""
    return compiled(embedding_table(W, padding_idx=padding_idx, ids=ids_dtype))


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


@pytest.mark.parametrize("dtype", [INT64, INT32])
@pytest.mark.parametrize("bad", [-1, 5, "min", "max"])
def test_among_many_ids_one_outside_fails_and_none_outside_passes(
    dtype: DType, bad: int | str
) -> None:
    # 40 ids: past the few a list reads, so one unsigned reduction checks them (runtime_checks
    # `_inside`): a negative id must not pass as a large unsigned one does, nor the largest.
    model = embedding(ids_dtype=dtype)
    limits = np.iinfo(np.int64 if dtype == INT64 else np.int32)
    wrong = {"min": limits.min, "max": limits.max}.get(str(bad), bad)
    inside = np.arange(40, dtype=dtype.numpy) % 5
    (rows,) = model.run({"ids": inside}).values()
    assert rows.shape == (40, 3)
    outside = inside.copy()
    outside[20] = wrong
    with pytest.raises(IndexOutOfRange) as info:
        model.run({"ids": outside})
    assert str(info.value) == f"op 1 (lookup_table_v2): expected Ids in [0, 5), got {wrong}"


def test_ids_read_by_two_tables_are_held_to_the_smaller_and_the_failure_names_its_op() -> None:
    g = GraphBuilder()
    g.feed("ids", INT64, [-1])
    g.param("big", weights(5, 3))
    g.param("small", weights(3, 3))
    for table, out in (("big", "a"), ("small", "b")):  # ops 1 and 2
        g.node("lookup_table_v2", {"W": [table], "Ids": ["ids"]}, {"Out": [V(out, [-1, 3])]})
    g.fetch("a")
    g.fetch("b")
    model = compiled(g)
    assert model.run({"ids": np.array([0, 2], np.int64)})["b"].shape == (2, 3)
    for ids in ([1, 4], list(range(3)) * 10 + [3]):  # a list's check, one reduction's
        with pytest.raises(IndexOutOfRange) as info:
            model.run({"ids": np.array(ids, np.int64)})
        assert str(info.value) == f"op 2 (lookup_table_v2): expected Ids in [0, 3), got {ids[-1]}"


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


def test_fed_ids_outside_fail_before_the_run_with_nothing_on_stderr(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    model = embedding()
    capfd.readouterr()
    with (
        caplog.at_level(logging.DEBUG, logger="graphgate.executor"),
        pytest.raises(IndexOutOfRange) as info,
    ):
        model.run({"ids": np.array([7], np.int64)})
    assert str(info.value) == "op 1 (lookup_table_v2): expected Ids in [0, 5), got 7"
    assert capfd.readouterr() == ("", "")
    # onnxruntime never ran: a failed run would have logged its text (below)
    assert [r for r in caplog.records if r.name == "graphgate.executor"] == []


def test_a_failed_guard_writes_nothing_to_stderr_and_logs_onnxruntime_text_at_debug(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    model = computed_ids()
    capfd.readouterr()
    with (
        caplog.at_level(logging.DEBUG, logger="graphgate.executor"),
        pytest.raises(IndexOutOfRange),
    ):
        model.run({"f": np.array([7], np.float32)})
    assert capfd.readouterr() == ("", "")  # onnxruntime logs to the process's fd 2 itself
    (record,) = [r for r in caplog.records if r.name == "graphgate.executor"]
    assert record.levelno == logging.DEBUG
    assert "2_lookup_table_v2/node_Reshape" in record.getMessage()  # the raw text, for debugging


def test_gather_along_a_dim_known_at_run_time_names_its_size() -> None:
    model = taken("gather", {"axis": 1}, width=-1)
    x = np.arange(14, dtype=np.float32).reshape(2, 7)
    np.testing.assert_array_equal(
        model.run({"x": x, "index": np.array([-7, 6], np.int64)})["out"], x[:, [-7, 6]]
    )
    with pytest.raises(IndexOutOfRange) as info:
        model.run({"x": x, "index": np.array([0, 7], np.int64)})
    assert str(info.value) == "op 2 (gather): expected Index in [-7, 7), got 7"


def computed_ids() -> CompiledModel:
    """cast (op 1) makes the ids from f, for lookup_table_v2 (op 2): their values are no feed."""
    g = GraphBuilder()
    g.feed("f", FP32, [-1])
    g.param("w", W)
    g.node("cast", {"X": ["f"]}, {"Out": [V("ids", [-1], INT64)]}, {"in_dtype": 5, "out_dtype": 3})
    g.node("lookup_table_v2", {"W": ["w"], "Ids": ["ids"]}, {"Out": [V("rows", [-1, 3])]}, {})
    g.fetch("rows")
    return compiled(g)


def test_ids_computed_in_the_program_are_refused_with_the_range_only() -> None:
    model = computed_ids()
    np.testing.assert_array_equal(model.run({"f": np.array([4, 1], np.float32)})["rows"], W[[4, 1]])
    with pytest.raises(IndexOutOfRange) as info:
        model.run({"f": np.array([1, 5], np.float32)})
    assert str(info.value) == "op 2 (lookup_table_v2): expected Ids in [0, 5), got one outside"


def computed_index(op_type: str) -> CompiledModel:
    """cast (op 1) makes the indices from f, for op 2 (depth or dim 5, as the models above)."""
    g = GraphBuilder()
    g.feed("f", FP32, [-1])
    g.node("cast", {"X": ["f"]}, {"Out": [V("i", [-1], INT64)]}, {"in_dtype": 5, "out_dtype": 3})
    if op_type == "lookup_table_v2":
        g.param("w", W)
        g.node(op_type, {"W": ["w"], "Ids": ["i"]}, {"Out": [V("out", [-1, 3])]}, {})
    elif op_type == "one_hot_v2":
        g.node(op_type, {"X": ["i"]}, {"Out": [V("out", [-1, 5])]}, {"depth": 5})
    else:
        g.param("x", weights(2, 5))
        attrs = {"axis": 1} if op_type == "gather" else {"dim": 1}
        g.node(op_type, {"X": ["x"], "Index": ["i"]}, {"Out": [V("out", [2, -1])]}, attrs)
    g.fetch("out")
    return compiled(g)


INDEX_OPS = ["lookup_table_v2", "gather", "index_select", "one_hot_v2"]
FED: dict[str, Callable[[], CompiledModel]] = {
    "lookup_table_v2": embedding,
    "gather": lambda: taken("gather", {"axis": 1}),
    "index_select": lambda: taken("index_select", {"dim": 1}),
    "one_hot_v2": one_hot,
}


@pytest.mark.parametrize("op_type", INDEX_OPS)
def test_fed_indices_reach_their_consumer_unguarded_and_are_checked_on_the_host(
    op_type: str,
) -> None:
    """No guard in the graph: what uses the fed indices (Gather, or one_hot's Unsqueeze) reads
    the graph input itself, and the session holds the check it makes before running."""
    model = FED[op_type]()
    graph = onnx.load_from_string(model.onnx_bytes).graph
    assert model.checks.index_checks == {}
    (host,) = model.checks.host_checks
    assert isinstance(host, HostIndexCheck) and host.op.endswith(f"({op_type})")
    assert host.check.indices in {i.name for i in graph.input}
    kinds = {n.op_type for n in graph.node}
    assert not kinds & {"ReduceMin", "ReduceMax", "GreaterOrEqual", "Less", "And"}
    users = [n.op_type for n in graph.node if host.check.indices in n.input]
    assert users == (["Unsqueeze"] if op_type == "one_hot_v2" else ["Gather"])


@pytest.mark.parametrize("op_type", INDEX_OPS)
def test_computed_indices_reach_their_consumer_through_a_guard_reshape_that_fails(
    op_type: str,
) -> None:
    """The node a failure is explained by is the guard's Reshape; the computed indices are read
    only by the guard, and what uses them (Gather, or one_hot's Unsqueeze) reads its output."""
    model = computed_index(op_type)
    graph = onnx.load_from_string(model.onnx_bytes).graph
    assert model.checks.host_checks == ()
    ((name, check),) = model.checks.index_checks.items()
    (guard,) = [n for n in graph.node if n.name == name]
    assert guard.op_type == "Reshape"
    (cast,) = [n for n in graph.node if n.op_type == "Cast" and n.input == ["f"]]
    readers = [n for n in graph.node if cast.output[0] in n.input]
    assert sorted(n.op_type for n in readers) == ["ReduceMax", "ReduceMin", "Reshape", "Shape"]
    assert guard in readers
    users = [n.op_type for n in graph.node if guard.output[0] in n.input]
    assert users == (["Unsqueeze"] if check.slot == "X" else ["Gather"])
    slot = {"lookup_table_v2": "Ids", "one_hot_v2": "X"}.get(op_type, "Index")
    low = "-5" if op_type in ("gather", "index_select") else "0"
    with pytest.raises(IndexOutOfRange) as info:
        model.run({"f": np.array([1, 5], np.float32)})
    assert str(info.value) == f"op 2 ({op_type}): expected {slot} in [{low}, 5), got one outside"


def test_an_empty_feed_of_indices_passes_the_host_check() -> None:
    (rows,) = embedding().run({"ids": np.zeros(0, np.int64)}).values()
    assert rows.shape == (0, 3)


def branch_embedding() -> CompiledModel:
    """rows = lookup_table_v2 (op 2, in a conditional_block) of the fed ids if flag else w, as
    paddle.static.nn.cond exports it."""
    g = GraphBuilder()
    g.feed("ids", INT64, [-1])
    g.feed("flag", DType.BOOL, [])
    g.param("w", W)
    for name, dtype, dims in [
        ("yes", FP32, [-1, 3]), ("no", FP32, [VOCAB, 3]), ("not_flag", DType.BOOL, []),
        ("mask", INT32, []), ("rows", FP32, [-1, 3]),
    ]:  # fmt: skip
        g.var(name, dtype, dims)
    g.var("s1", None, vartype=pb.VarType.STEP_SCOPES)
    g.var("s2", None, vartype=pb.VarType.STEP_SCOPES)
    then_block, else_block = g.add_block(0), g.add_block(0)
    g.var("picked", FP32, [-1, 3], block=then_block)
    g.op("conditional_block", {"Cond": ["flag"], "Input": ["ids", "w"]},
         {"Out": ["yes"], "Scope": ["s1"]},
         {"sub_block": Attr(pb.BLOCK, then_block), "is_scalar_condition": True})  # fmt: skip
    g.op("lookup_table_v2", {"W": ["w"], "Ids": ["ids"]}, {"Out": ["picked"]}, block=then_block)
    g.op("assign", {"X": ["picked"]}, {"Out": ["yes"]}, block=then_block)
    g.op("logical_not", {"X": ["flag"]}, {"Out": ["not_flag"]})
    g.op("conditional_block", {"Cond": ["not_flag"], "Input": ["w"]},
         {"Out": ["no"], "Scope": ["s2"]},
         {"sub_block": Attr(pb.BLOCK, else_block), "is_scalar_condition": True})  # fmt: skip
    g.op("assign", {"X": ["w"]}, {"Out": ["no"]}, block=else_block)
    g.op("cast", {"X": ["flag"]}, {"Out": ["mask"]},
         {"in_dtype": int(DType.BOOL), "out_dtype": int(INT32)})  # fmt: skip
    g.op("select_input", {"Mask": ["mask"], "X": ["no", "yes"]}, {"Out": ["rows"]})
    g.fetch("rows")
    return compiled(g)


def test_fed_ids_used_in_a_branch_are_checked_only_when_the_branch_runs() -> None:
    model = branch_embedding()
    assert model.checks.host_checks == () and len(model.checks.index_checks) == 1
    out_of_range = np.array([1, 9], np.int64)
    with pytest.raises(IndexOutOfRange) as info:
        model.run({"ids": out_of_range, "flag": np.array(True)})
    assert str(info.value) == "block 1, op 0 (lookup_table_v2): expected Ids in [0, 5), got 9"
    # not taken: nothing reads the ids (a check before the run would refuse the request)
    model.run({"ids": out_of_range, "flag": np.array(False)})


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
    checks = RuntimeChecks(index_checks={"3_lookup_table_v2/g_9": check})
    error = checks.explain(text, {"ids": np.array([2, 9])}, {"w": (8, 4)})
    assert str(error) == "op 3 (lookup_table_v2): expected Ids in [0, 8), got 9"
    unknown = checks.explain(text, {}, {})
    assert str(unknown) == (
        "op 3 (lookup_table_v2): expected Ids in [0, n) where n is the size of the indexed dim, "
        "got one outside"
    )
