"""A cond whose branches give different dims: the session checks each fetch against the branch
that ran (the select_input's Mask is a hidden output), not only the dims both branches share."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from executor import SessionOptions, compile
from executor.convert import lower
from executor.errors import OutputMismatch
from executor.runtime_checks import BRANCH_MASK_PREFIX
from graph_proto import framework_pb2 as pb
from graph_proto.builder import Attr, ProgramBuilder
from graph_proto.types import DType
from tests.support.control_flow import branch
from validator import ValidatedProgram, validate
from validator.ops import TensorType
from validator.runtime import reinfer

FP32, BOOL, INT32 = DType.FP32, DType.BOOL, DType.INT32
STEP_SCOPES = pb.VarType.STEP_SCOPES
SELECT_INDEX = 8  # the select_input's op index in _uneven_branches (the feed is op 0)


def _uneven_branches() -> ProgramBuilder:
    """x fp32[n, 4]: out = concat([x, x]) (fp32[2n, 4]) if mean(x) > 0 else x[:, :2]
    (fp32[n, 2]), as paddle.static.nn.cond exports it; fetches out and relu(out)."""
    g = ProgramBuilder()
    g.feed("x", FP32, [-1, 4])
    for name, dtype, dims in [
        ("m", FP32, []), ("zero", FP32, []), ("p", BOOL, []), ("not_p", BOOL, []),
        ("mask", INT32, []), ("yes", FP32, [-1, 4]), ("no", FP32, [-1, 2]),
        ("out", FP32, [-1, -1]), ("act", FP32, [-1, -1]),
    ]:  # fmt: skip
        g.var(name, dtype, dims)
    g.var("s1", None, vartype=STEP_SCOPES)
    g.var("s2", None, vartype=STEP_SCOPES)
    g.op("reduce_mean", {"X": ["x"]}, {"Out": ["m"]}, {"dim": [], "reduce_all": True})
    g.op("fill_constant", {}, {"Out": ["zero"]},
         {"dtype": int(FP32), "shape": Attr(pb.LONGS, []), "value": 0.0})  # fmt: skip
    g.op("greater_than", {"X": ["m"], "Y": ["zero"]}, {"Out": ["p"]})
    then_block, else_block = g.add_block(0), g.add_block(0)
    g.var("t1", FP32, [-1, 4], block=then_block)
    g.var("t2", FP32, [-1, 2], block=else_block)
    g.op("conditional_block", {"Cond": ["p"], "Input": ["x"]}, {"Out": ["yes"], "Scope": ["s1"]},
         {"sub_block": Attr(pb.BLOCK, then_block), "is_scalar_condition": True})  # fmt: skip
    g.op("concat", {"X": ["x", "x"]}, {"Out": ["t1"]}, {"axis": 0}, block=then_block)
    g.op("assign", {"X": ["t1"]}, {"Out": ["yes"]}, block=then_block)
    g.op("logical_not", {"X": ["p"]}, {"Out": ["not_p"]})
    g.op("conditional_block", {"Cond": ["not_p"], "Input": ["x"]}, {"Out": ["no"], "Scope": ["s2"]},
         {"sub_block": Attr(pb.BLOCK, else_block), "is_scalar_condition": True})  # fmt: skip
    g.op("slice", {"Input": ["x"]}, {"Out": ["t2"]},
         {"axes": [1], "starts": [0], "ends": [2]}, block=else_block)  # fmt: skip
    g.op("assign", {"X": ["t2"]}, {"Out": ["no"]}, block=else_block)
    g.op("cast", {"X": ["p"]}, {"Out": ["mask"]}, {"in_dtype": int(BOOL), "out_dtype": int(INT32)})
    g.op("select_input", {"Mask": ["mask"], "X": ["no", "yes"]}, {"Out": ["out"]})
    g.op("relu", {"X": ["out"]}, {"Out": ["act"]})
    g.fetch("out")
    g.fetch("act")
    return g


@pytest.fixture(scope="module")
def program() -> ValidatedProgram:
    g = _uneven_branches()
    validated = validate(g.program_bytes(), g.params_bytes())
    (select,) = [op for op in validated.ops if op.op_type == "select_input"]
    assert select.index == SELECT_INDEX
    return validated


def _x(sign: float, rows: int = 3) -> np.ndarray:
    return np.full((rows, 4), sign, np.float32)


def test_without_the_mask_only_the_dims_both_branches_share_are_known(
    program: ValidatedProgram,
) -> None:
    types = reinfer(program, {"x": (3, 4)})
    assert types["yes"].shape == (6, 4) and types["no"].shape == (3, 2)
    assert types["out"].shape == (-1, -1) and types["act"].shape == (-1, -1)


@pytest.mark.parametrize(("mask", "dims"), [(1, (6, 4)), (0, (3, 2))], ids=["true", "false"])
def test_with_the_mask_known_the_taken_branch_gives_exact_dims(
    program: ValidatedProgram, mask: int, dims: tuple[int, int]
) -> None:
    types = reinfer(program, {"x": (3, 4)}, taken={SELECT_INDEX: mask})
    assert types["out"] == TensorType(FP32, dims)
    assert types["act"] == TensorType(FP32, dims)  # and what follows it


def test_the_mask_of_a_select_input_whose_branches_differ_is_a_hidden_output(
    program: ValidatedProgram,
) -> None:
    lowered = lower(program)
    mask_output = f"{BRANCH_MASK_PREFIX}{SELECT_INDEX}"
    assert lowered.checks.hidden_outputs == (mask_output,)
    assert [o.name for o in lowered.model.graph.output] == ["out", "act", mask_output]


def test_branches_of_one_type_export_no_mask() -> None:
    assert lower(validate(branch().program_bytes())).checks.hidden_outputs == ()


@pytest.mark.parametrize(("sign", "dims"), [(1.0, (6, 4)), (-1.0, (3, 2))], ids=["true", "false"])
def test_the_real_run_passes_the_exact_check_and_hides_the_mask(
    program: ValidatedProgram, sign: float, dims: tuple[int, int]
) -> None:
    model = compile(program, SessionOptions(use_cuda=False))
    x = _x(sign)
    out = model.run({"x": x})
    assert list(out) == ["out", "act"]
    want = np.concatenate([x, x]) if sign > 0 else x[:, :2]
    np.testing.assert_array_equal(out["out"], want)
    np.testing.assert_array_equal(out["act"], np.maximum(want, 0))
    assert out["out"].shape == dims


def test_a_repeated_request_reuses_the_cached_types(program: ValidatedProgram) -> None:
    model = compile(program, SessionOptions(use_cuda=False))
    model.run({"x": _x(1.0)})
    assert len(model._shapes) == 2  # the feed dims alone, then with the branch taken
    model.run({"x": _x(1.0)})
    assert len(model._shapes) == 2  # no re-inference on a hit
    model.run({"x": _x(-1.0)})
    assert len(model._shapes) == 3  # the other branch: one more entry


def _select_picking_the_wrong_branch(model: onnx.ModelProto) -> bytes:
    """The model with the select_input's If branches swapped: a lowering bug that returns the
    branch that did not run (its empty stand-in, dims [0, 0])."""
    tampered = onnx.ModelProto()
    tampered.CopyFrom(model)
    (select,) = [
        n
        for n in tampered.graph.node
        if n.op_type == "If" and n.name.startswith(f"{SELECT_INDEX}_select_input")
    ]
    then_branch, else_branch = (a for a in select.attribute if a.type == onnx.AttributeProto.GRAPH)
    swapped = onnx.GraphProto()
    swapped.CopyFrom(then_branch.g)
    then_branch.g.CopyFrom(else_branch.g)
    else_branch.g.CopyFrom(swapped)
    return tampered.SerializeToString()


def test_an_output_with_the_other_branchs_dims_is_a_mismatch(program: ValidatedProgram) -> None:
    model = compile(program, SessionOptions(use_cuda=False))
    bad = _select_picking_the_wrong_branch(onnx.load_from_string(model.onnx_bytes))
    tampered = dataclasses.replace(
        model,
        onnx_bytes=bad,
        session=ort.InferenceSession(bad, providers=["CPUExecutionProvider"]),
        _shapes=type(model._shapes)(),
    )
    # The dims-both-branches-share check ([-1, -1]) would let the empty stand-in through.
    with pytest.raises(OutputMismatch, match=r"expected float32\[6, 4\], got float32\[0, 0\]"):
        tampered.run({"x": _x(1.0)})
