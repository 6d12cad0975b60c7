"""Loops lowered to ONNX: M = the policy's bound + 1, and hidden flag outputs for "ran past it"
and "grew past the byte cap". The gate's constant-M rule through nested subgraphs: test_compile."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from executor import SessionOptions, compile
from executor.convert import lower
from executor.errors import LoopTripLimitExceeded, TensorTooLarge, WrongShape
from executor.runtime_checks import LOOP_BOUND_EXCEEDED
from graph_proto.builder import ProgramBuilder, set_attr
from tests.support.control_flow import branch, counting_loop
from validator import Policy, validate


def _loops(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    found = []
    for node in graph.node:
        if node.op_type == "Loop":
            found.append(node)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                found.extend(_loops(attr.g))
    return found


def test_a_loop_runs_at_most_the_bound_plus_one_and_reports_overflow() -> None:
    g = counting_loop()
    lowered = lower(validate(g.program_bytes(), g.params_bytes(), Policy(max_loop_trips=9)))
    (loop,) = _loops(lowered.model.graph)
    constants = {t.name: t for t in lowered.model.graph.initializer}
    assert int(numpy_helper.to_array(constants[loop.input[0]])) == 10
    assert lowered.checks.hidden_outputs == (LOOP_BOUND_EXCEEDED,)
    assert [o.name for o in lowered.model.graph.output][-1] == LOOP_BOUND_EXCEEDED


def test_a_program_without_loops_has_no_hidden_output() -> None:
    lowered = lower(validate(branch().program_bytes()))
    assert lowered.checks.hidden_outputs == ()
    assert [o.name for o in lowered.model.graph.output] == ["out"]


@pytest.mark.parametrize(("n", "trips"), [(0, 0), (3, 3), (3000, None)])
def test_the_default_bound_is_enforced(n: int, trips: int | None) -> None:
    g = counting_loop()
    model = compile(validate(g.program_bytes(), g.params_bytes()), SessionOptions(use_cuda=False))
    feeds = {"x": np.ones((2, 3), np.float32), "n": np.asarray(n)}
    if trips is None:
        with pytest.raises(LoopTripLimitExceeded, match="expected at most 1000 iterations"):
            model.run(feeds)
        return
    out = model.run(feeds)
    assert list(out) == ["i", "x"]  # the hidden flag is never returned
    assert out["i"].shape == () and int(out["i"]) == trips


def _doubling_loop() -> ProgramBuilder:
    """while i < n: i += 1; x = concat([x, x]): the loop var's rows double every iteration."""
    g = counting_loop()
    g.block(1).vars[0].type.dense_tensor.tensor.dims[:] = [-1, 3]  # half
    scale = g.block(1).ops[1]
    del scale.attrs[:]
    scale.type = "concat"
    scale.inputs[0].arguments.append("x")
    set_attr(scale.attrs.add(), "axis", 0)
    return g


def test_a_loop_var_growing_past_the_byte_cap_stops_the_loop_with_a_typed_error() -> None:
    g = _doubling_loop()
    policy = Policy(max_tensor_bytes=10_000)
    validated = validate(g.program_bytes(), g.params_bytes(), policy)
    # The feed keeps its declared dims; the var the loop rewrote is known only at run time.
    assert [list(spec.dims) for spec in validated.inputs] == [[2, 3], []]
    assert [list(spec.dims) for spec in validated.outputs] == [[], [-1, 3]]
    model = compile(validated, SessionOptions(use_cuda=False))
    with pytest.raises(WrongShape):
        model.run({"x": np.ones((4, 3), np.float32), "n": np.asarray(1)})
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = model.run({"x": x, "n": np.asarray(5)})
    np.testing.assert_array_equal(out["x"], np.tile(x, (32, 1)))  # 64 rows, 768 bytes
    # 1024 rows of float32[3] hold 12288 bytes: the 9th iteration passes the cap, not the 20th.
    with pytest.raises(TensorTooLarge, match="expected at most 10000 bytes, got more"):
        model.run({"x": x, "n": np.asarray(20)})
