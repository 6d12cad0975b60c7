"""compile(): the provider it chose, CUDA falling back to CPU, thread options, a session
onnxruntime cannot build, and the ONNX gate on hand-made models."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, external_data_helper, helper, numpy_helper

from executor import SessionOptions, compile, gate, session_device
from executor.gate import GateError
from executor.lower import IR_VERSION, ONNX_OPSET, LoweringError
from executor.session import _session
from graph_proto.types import DType
from tests.support.builders import CONV2D_ATTRS, FP32, GraphBuilder, V, mlp, weights
from validator import Code, ValidatedProgram, validate
from validator.ops import REGISTRY, Registry

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
FP64 = DType.FP64


def _mlp() -> ValidatedProgram:
    built = mlp().built()
    return validate(built.program, built.params)


def test_compile_reports_the_provider_it_chose() -> None:
    model = compile(_mlp(), SessionOptions(use_cuda=False))
    assert model.provider == CPU
    assert model.session.get_providers() == [CPU]


def test_cuda_requested_where_it_cannot_start_builds_on_cpu_quietly(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    """Sessions go where `session_device` says, without a line each: the reason is said once
    per process by the commands (tests/server/test_doctor.py)."""
    with caplog.at_level(logging.DEBUG, logger="graphgate"):
        model = compile(_mlp(), SessionOptions(use_cuda=True))

    assert model.provider == session_device(True).providers[0]
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert capfd.readouterr().err == ""  # nor onnxruntime's own multi-line error
    x = np.ones((2, 8), np.float32)
    assert model.run({"x": x})["probs"].shape == (2, 4)


def test_a_cuda_provider_that_fails_to_start_falls_back_without_onnxruntime_noise(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """onnxruntime-gpu asked for CUDA where it cannot start (no driver here, or no GPU) falls
    back to CPU; its multi-line error stays quiet."""
    if CUDA not in ort.get_available_providers() or session_device(True).on_cuda:
        pytest.skip("needs an onnxruntime with a CUDA provider that cannot start here")
    model = helper.make_model(
        helper.make_graph(
            [helper.make_node("Identity", ["x"], ["y"])],
            "identity",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        ),
        opset_imports=[helper.make_opsetid("", ONNX_OPSET)],
        ir_version=IR_VERSION,
    )
    built = _session(model.SerializeToString(), ort.SessionOptions(), [CUDA, CPU])
    assert built.get_providers() == [CPU]
    assert capfd.readouterr().err == ""


def test_thread_options_are_applied_to_the_session() -> None:
    options = SessionOptions(intra_op_threads=2, inter_op_threads=3, use_cuda=False)
    applied = compile(_mlp(), options).session.get_session_options()
    assert (applied.intra_op_num_threads, applied.inter_op_num_threads) == (2, 3)


@pytest.mark.parametrize(
    ("allow", "spin_us", "expected"),
    [
        (False, 20, {"intra_op.allow_spinning": "0", "intra_op.spin_duration_us": ""}),
        (True, 20, {"intra_op.allow_spinning": "", "intra_op.spin_duration_us": "20"}),
        (True, 0, {"intra_op.allow_spinning": "", "intra_op.spin_duration_us": ""}),
    ],
)
def test_spinning_options_are_applied_to_the_session(
    allow: bool, spin_us: int, expected: dict[str, str]
) -> None:
    """Not spinning, spinning a bounded time, or onnxruntime's default ("": not set)."""
    options = SessionOptions(use_cuda=False, allow_spinning=allow, spin_us=spin_us)
    applied = compile(_mlp(), options).session.get_session_options()
    for key, value in expected.items():
        for pool in ("intra_op", "inter_op"):
            name = f"session.{key.replace('intra_op', pool)}"
            assert _config_entry(applied, name) == value, name


def _config_entry(options: ort.SessionOptions, name: str) -> str:
    try:
        return str(options.get_session_config_entry(name))
    except RuntimeError:  # onnxruntime's way of saying it is not set
        return ""


def test_a_float64_conv_is_a_lowering_error_not_an_onnxruntime_error() -> None:
    """onnxruntime's CPU provider has no float64 Conv kernel: compile refuses the model."""
    g = GraphBuilder()
    g.feed("image", FP64, [-1, 3, 8, 8])
    g.param("conv.w", weights(4, 3, 3, 3, dtype=FP64))
    g.node(
        "conv2d",
        {"Input": ["image"], "Filter": ["conv.w"]},
        {"Output": [V("conv", [-1, 4, 8, 8], FP64)]},
        CONV2D_ATTRS,
    )
    g.fetch("conv")
    program = validate(g.program_bytes(), g.params_bytes())

    with pytest.raises(LoweringError) as info:
        compile(program, SessionOptions(use_cuda=False))

    assert str(info.value) == (
        "onnxruntime cannot build a session for this model: [ONNXRuntimeError] : 9 : "
        "NOT_IMPLEMENTED : Could not find an implementation for Conv(11) node with name "
        "'1_conv2d/node_Conv_2'"
    )
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert info.value.code == Code.LOWERING_UNSUPPORTED  # a refusal of this runtime, no bug


# --- the ONNX gate on hand-made models ---------------------------------------------------------


def _model(
    nodes: list[onnx.NodeProto],
    initializers: list[onnx.TensorProto] = (),  # type: ignore[assignment]
    *,
    opsets: list[tuple[str, int]] = [("", ONNX_OPSET)],  # noqa: B006
) -> onnx.ModelProto:
    """x: float32[2] in, y out; the nodes in between."""
    graph = helper.make_graph(
        nodes,
        "hand-made",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        list(initializers),
    )
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid(domain, version) for domain, version in opsets],
        ir_version=IR_VERSION,
    )


def _loop_body(name: str, made: list[onnx.NodeProto] | None = None) -> onnx.GraphProto:
    """A Loop body carrying one float32[2]: in {name}_i, {name}_cond_in, {name}_in; out
    {name}_cond_out (the cond passed through) and {name}_out, which `made` computes (a copy of
    {name}_in when None)."""
    if made is None:
        made = [helper.make_node("Identity", [f"{name}_in"], [f"{name}_out"])]
    return helper.make_graph(
        [helper.make_node("Identity", [f"{name}_cond_in"], [f"{name}_cond_out"]), *made],
        name,
        [
            helper.make_tensor_value_info(f"{name}_i", TensorProto.INT64, []),
            helper.make_tensor_value_info(f"{name}_cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info(f"{name}_in", TensorProto.FLOAT, [2]),
        ],
        [
            helper.make_tensor_value_info(f"{name}_cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, [2]),
        ],
    )


def _loop(trips: onnx.TensorProto | None) -> onnx.ModelProto:
    """y = x, carried through a Loop whose trip count M is the initializer `trips` (or, when
    None, a value computed at run time)."""
    body = _loop_body("body")
    cond = numpy_helper.from_array(np.array(True), "cond")
    nodes = [helper.make_node("Loop", ["trips", "cond", "x"], ["y"], name="loop", body=body)]
    if trips is None:
        nodes.insert(0, helper.make_node("Size", ["x"], ["trips"], name="size"))
        return _model(nodes, [cond])
    return _model(nodes, [trips, cond])


def _nested_loops(inner_trips: str) -> onnx.ModelProto:
    """A Loop whose body holds a Loop with trip count `inner_trips`; M of both from outside."""
    body = _loop_body("inner")
    inner = helper.make_node(
        "Loop", [inner_trips, "cond", "outer_in"], ["inner_v"], name="inner", body=body
    )
    made = [inner, helper.make_node("Identity", ["inner_v"], ["outer_out"])]
    if inner_trips == "made_inside":
        made.insert(0, helper.make_node("Identity", ["trips"], ["made_inside"]))
    outer_body = _loop_body("outer", made)
    outer = helper.make_node("Loop", ["trips", "cond", "x"], ["y"], name="outer", body=outer_body)
    return _model([outer], [_int64("trips", 3), numpy_helper.from_array(np.asarray(True), "cond")])


def _identity() -> onnx.ModelProto:
    return _model([helper.make_node("Identity", ["x"], ["y"], name="copy")])


def _with_function() -> onnx.ModelProto:
    model = _identity()
    model.functions.append(
        helper.make_function(
            "", "Twice", ["a"], ["b"], [helper.make_node("Add", ["a", "a"], ["b"])], []
        )
    )
    return model


def _external_weights() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones(2, np.float32), "w")
    external_data_helper.set_external_data(w, location="weights.bin", offset=0, length=8)
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    return _model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [w])


def _int64(name: str, value: int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value, np.int64), name)


def test_the_gate_passes_a_plain_model_and_a_bounded_loop() -> None:
    gate.check(_identity())
    gate.check(_loop(_int64("trips", gate.MAX_LOOP_TRIPS)))


def test_the_gate_sees_outer_constants_as_trip_counts_of_nested_loops() -> None:
    gate.check(_nested_loops("trips"))


def test_the_gate_refuses_a_nested_trip_count_computed_in_the_subgraph() -> None:
    with pytest.raises(gate.GateError, match="expected a Loop with a constant trip count M"):
        gate.check(_nested_loops("made_inside"))


@pytest.mark.parametrize(
    ("model", "message"),
    [
        pytest.param(
            _model([helper.make_node("Gelu", ["x"], ["y"], name="fused", domain="com.microsoft")]),
            "node 'fused': expected the default domain, got 'com.microsoft'",
            id="com.microsoft-node",
        ),
        pytest.param(
            _model(
                [helper.make_node("Gelu", ["x"], ["y"], name="fused", domain="com.microsoft")],
                opsets=[("", ONNX_OPSET), ("com.microsoft", 1)],
            ),
            f"expected opset_import [('', {ONNX_OPSET})], got [('', {ONNX_OPSET}), "
            "('com.microsoft', 1)]",
            id="com.microsoft-opset",
        ),
        pytest.param(
            _model([helper.make_node("RandomNormalLike", ["x"], ["y"], name="noise")]),
            "node 'noise': ONNX op 'RandomNormalLike' is not in the gate's allowlist",
            id="op-not-allowed",
        ),
        pytest.param(
            _external_weights(),
            "tensor 'w': expected inline data, got external data",
            id="external-data",
        ),
        pytest.param(_with_function(), "expected no functions, got 1", id="function"),
        pytest.param(
            _loop(_int64("trips", 10**9)),
            "node 'loop': expected a trip count in [0, 1024], got 1000000000",
            id="loop-huge-trip-count",
        ),
        pytest.param(
            _loop(_int64("trips", -1)),
            "node 'loop': expected a trip count in [0, 1024], got -1",
            id="loop-negative-trip-count",
        ),
        pytest.param(
            _loop(None),
            "node 'loop': expected a Loop with a constant trip count M",
            id="loop-trip-count-from-data",
        ),
    ],
)
def test_the_gate_rejects(model: onnx.ModelProto, message: str) -> None:
    with pytest.raises(GateError) as info:
        gate.check(model)
    assert str(info.value) == message


# --- lowering errors: a graphgate bug, located at the op -----------------------------------------


def _with_an_op_that_has_no_lowering() -> Registry:
    """Every registered op, and relu again as "relu_unlowered": validated, but no emitter."""
    relu = REGISTRY.get("relu")
    assert relu is not None
    return Registry(tuple(REGISTRY), (dataclasses.replace(relu, op_type="relu_unlowered"),))


def test_a_lowering_that_fails_is_a_located_lowering_failed_error() -> None:
    g = GraphBuilder()
    g.feed("x", FP32, [-1, 4])
    g.node("relu", {"X": ["x"]}, {"Out": [V("r", [-1, 4])]})
    g.node("relu_unlowered", {"X": ["r"]}, {"Out": [V("y", [-1, 4])]})
    g.fetch("y")
    program = validate(g.program_bytes(), registry=_with_an_op_that_has_no_lowering())

    with pytest.raises(LoweringError) as info:
        compile(program, SessionOptions(use_cuda=False))

    assert str(info.value) == "op 'relu_unlowered' has no ONNX lowering"
    assert info.value.code == Code.LOWERING_FAILED
    located = (info.value.block, info.value.op_index, info.value.op_type)
    assert located == (0, 2, "relu_unlowered")  # op 0 is the feed
