"""`graphgate convert` writes a portable ONNX: any onnxruntime session runs it as is, its outputs
are exactly the program's fetches (none of the hidden outputs graphgate's own session reads), no
initializer goes unread, and a model with loops states the loop bound policy in its metadata.

Every model of the conformance suite (tests/conformance/models.py) and control-flow programs of
tests/conformance/control_flow.py are converted by convert.export (what the command calls),
loaded into a plain onnxruntime.InferenceSession, and compared with the serving path
(CompiledModel.run) on the same feeds."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from executor import CompiledModel, SessionOptions, compile
from executor.convert import MAX_LOOP_TRIPS_KEY, MAX_TENSOR_BYTES_KEY, export, lower
from executor.runtime_checks import BRANCH_MASK_PREFIX, LOOP_FLAG_OUTPUTS
from tests.conformance.control_flow import (
    cond_with_different_shapes,
    nested_while,
    while_counting_to_n,
    while_with_cond_in_body,
)
from tests.conformance.models import MODELS
from tests.conformance.paddle_util import Saved, build_and_save, random_feeds
from validator import Policy, ValidatedProgram, validate

pytestmark = pytest.mark.paddle

CONTROL_FLOW: dict[str, Callable[[], Saved]] = {
    "cond-with-branches-of-different-shapes": lambda: build_and_save(cond_with_different_shapes),
    "while-counting-to-n": lambda: build_and_save(while_counting_to_n),
    "while-with-a-cond-in-its-body": lambda: build_and_save(while_with_cond_in_body),
    "nested-while": lambda: build_and_save(nested_while),
}
PROGRAMS: dict[str, Callable[[], Saved]] = {**MODELS, **CONTROL_FLOW}
POLICY = Policy(max_loop_trips=50)


@cache
def validated(name: str) -> ValidatedProgram:
    saved = PROGRAMS[name]()
    return validate(saved.program, saved.params, POLICY)


def serving(program: ValidatedProgram) -> CompiledModel:
    return compile(program, SessionOptions(use_cuda=False))


def plain_session(model: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def unread_initializers(model: onnx.ModelProto) -> list[str]:
    """Initializers of the main graph that no node, in any subgraph, reads, and no output is."""
    read = {info.name for info in model.graph.output}
    pending = [model.graph]
    while pending:
        graph = pending.pop()
        for node in graph.node:
            read.update(node.input)
            for attr in node.attribute:
                pending.extend([attr.g] if attr.HasField("g") else [])
                pending.extend(attr.graphs)
        read.update(info.name for info in graph.output)
    return [t.name for t in model.graph.initializer if t.name not in read]


def fetch_outputs(program: ValidatedProgram) -> list[str]:
    """The ONNX outputs the fetches are: named after their variable, but a fed variable that a
    loop rewrites gets ":output" (ONNX names a graph input and an output apart)."""
    fed = {spec.name for spec in program.inputs}
    return [f"{s.name}:output" if s.name in fed else s.name for s in program.outputs]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_the_converted_model_loads_anywhere_and_outputs_exactly_the_fetches(
    name: str, capfd: pytest.CaptureFixture[str]
) -> None:
    program = validated(name)
    model = export(program)
    capfd.readouterr()
    session = plain_session(model)
    assert "Removing initializer" not in capfd.readouterr().err  # onnxruntime's warning
    assert [o.name for o in session.get_outputs()] == fetch_outputs(program)
    assert unread_initializers(model) == []


# vgg11 and AlexNet hold 530 and 240 MB of weights: a second session (the serving one) would
# cost each ~20 s on CI's 2 cores; like every CNN here they have no hidden output to drop.
HEAVY: frozenset[str] = frozenset({"vgg11", "alexnet"})


@pytest.mark.parametrize("name", sorted(PROGRAMS.keys() - HEAVY))
def test_the_converted_model_computes_what_the_serving_path_returns(name: str) -> None:
    program = validated(name)
    session = plain_session(export(program))
    feeds = random_feeds(program, batch=1, int_high=4)
    theirs = session.run(None, feeds)
    ours = serving(program).run(feeds)
    for spec, got in zip(program.outputs, theirs, strict=True):
        expected = ours[spec.name]
        assert got.shape == expected.shape and got.dtype == expected.dtype, spec.name
        if np.issubdtype(expected.dtype, np.floating):
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6, err_msg=spec.name)
        else:
            np.testing.assert_array_equal(got, expected, err_msg=spec.name)


@pytest.mark.parametrize("name", sorted(CONTROL_FLOW))
def test_the_serving_form_keeps_its_hidden_outputs_and_reads_every_initializer(
    name: str,
) -> None:
    program = validated(name)
    lowered = lower(program)
    outputs = [info.name for info in lowered.model.graph.output]
    hidden = list(lowered.checks.hidden_outputs)
    assert hidden and outputs == fetch_outputs(program) + hidden
    loop_flags = set(LOOP_FLAG_OUTPUTS.values())
    assert all(h in loop_flags or h.startswith(BRANCH_MASK_PREFIX) for h in hidden)
    assert unread_initializers(lowered.model) == []


@pytest.mark.parametrize("name", sorted(CONTROL_FLOW))
def test_a_model_with_loops_states_the_loop_bound_policy(name: str) -> None:
    program = validated(name)
    props = {p.key: p.value for p in export(program).metadata_props}
    if any(op.op_type == "while" for op in program.ops):
        assert props[MAX_LOOP_TRIPS_KEY] == "50"
        assert props[MAX_TENSOR_BYTES_KEY] == str(POLICY.max_tensor_bytes)
    else:
        assert MAX_LOOP_TRIPS_KEY not in props


def test_a_loop_past_the_bound_stops_at_the_bound_plus_one_in_the_portable_model() -> None:
    """What the metadata states: another runtime gets the loop's state after bound + 1 trips,
    where graphgate's session refuses the request."""
    program = validated("while-counting-to-n")
    session = plain_session(export(program))
    feeds = {"x": np.zeros((1, 3), np.float32), "n": np.asarray(80, np.int64)}
    outputs = session.run(None, feeds)
    counter = dict(zip([o.name for o in session.get_outputs()], outputs, strict=True))
    assert int(counter["fill_constant_1.tmp_0"]) == 51
