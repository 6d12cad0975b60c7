"""validate() on good programs: the report, the ValidatedProgram, and how problems are collected."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from graph_proto import framework_pb2 as pb
from graph_proto.builder import set_attr
from graph_proto.types import DType
from tests.support.builders import BOOKKEEPING_ATTRS, FP32, GraphBuilder, V, affine, conv, mlp
from validator import (
    DEFAULT_POLICY,
    Code,
    Policy,
    Report,
    TensorSpec,
    ValidatedProgram,
    ValidationFailed,
    validate,
)
from validator.attrs import COMMON_ATTRS
from validator.ops import REGISTRY


def validated(g: GraphBuilder, policy: Policy | None = None) -> ValidatedProgram:
    built = g.built()
    if policy is None:
        return validate(built.program, built.params)
    return validate(built.program, built.params, policy)


def messages(g: GraphBuilder) -> list[str]:
    built = g.built()
    with pytest.raises(ValidationFailed) as info:
        validate(built.program, built.params)
    return [str(d) for d in info.value.diagnostics]


def test_report_of_a_small_program() -> None:
    # x[-1, 4] * scale[4] + bias[4] at the default max batch 32: each op is 4 FLOPs per sample,
    # and at most two float32[4] activations (16 bytes each per sample) are live at once.
    result = validated(affine())
    assert result.report == Report(
        inputs=(TensorSpec("x", DType.FP32, (-1, 4)),),
        outputs=(TensorSpec("y", DType.FP32, (-1, 4)),),
        op_histogram={"feed": 1, "elementwise_mul": 1, "elementwise_add": 1, "fetch": 1},
        op_count=4,
        param_count=2,
        param_bytes=32,
        batch=32,
        flops_per_sample=8,
        peak_activation_bytes_per_sample=32,
        largest_tensor_bytes=32 * 4 * 4,
        batchable=True,
        warnings=(),
        symbolic_inputs=(("x", ("B", 4)),),
        dim_bounds=(("B", 32),),
    )
    assert result.inputs == result.report.inputs and result.outputs == result.report.outputs


def test_report_json() -> None:
    assert validated(affine()).report.to_json() == {
        "inputs": [{"name": "x", "dtype": "float32", "dims": [-1, 4]}],
        "outputs": [{"name": "y", "dtype": "float32", "dims": [-1, 4]}],
        "op_histogram": {"feed": 1, "elementwise_mul": 1, "elementwise_add": 1, "fetch": 1},
        "op_count": 4,
        "params": {"count": 2, "bytes": 32},
        "cost": {
            "batch": 32,
            "flops_per_sample": 8,
            "peak_activation_bytes_per_sample": 32,
            "largest_tensor_bytes": 512,
            "sized_by_input_data": [],
        },
        "batchable": True,
        "batch_coupling": None,
        "warnings": [],
        "symbolic_inputs": {"x": ["B", 4]},
        "dim_constraints": [],
        "dim_bounds": {"B": 32},
    }


def test_cost_figures_scale_with_the_policys_max_batch() -> None:
    small = validated(affine(), Policy(max_batch=1)).report
    large = validated(affine(), Policy(max_batch=64)).report
    assert (small.batch, large.batch) == (1, 64)
    assert small.flops_per_sample == large.flops_per_sample == 8
    assert (small.largest_tensor_bytes, large.largest_tensor_bytes) == (16, 64 * 16)


def test_a_fixed_batch_is_costed_as_is() -> None:
    report = validated(affine(batch=3)).report
    assert (report.batch, report.flops_per_sample, report.largest_tensor_bytes) == (1, 24, 48)


def test_mlp_and_conv_reports() -> None:
    m = validated(mlp((8, 16, 4))).report
    assert m.op_histogram == {
        "matmul_v2": 2, "elementwise_add": 2, "feed": 1, "relu": 1, "softmax": 1, "fetch": 1,
    }  # fmt: skip
    assert (m.param_count, m.param_bytes) == (4, 4 * (8 * 16 + 16 + 16 * 4 + 4))
    assert m.outputs == (TensorSpec("probs", DType.FP32, (-1, 4)),)
    c = validated(conv(3, 8, 16)).report
    assert c.outputs == (TensorSpec("pool", DType.FP32, (-1, 8, 8, 8)),)
    assert c.flops_per_sample > 2 * 8 * 16 * 16 * 3 * 3 * 3  # conv multiply-adds dominate


def test_signature_is_in_col_order_not_op_order() -> None:
    g = GraphBuilder()
    b = g.feed("b", DType.INT64, [-1])
    a = g.feed("a", FP32, [-1, 2])
    g.node("elementwise_add", {"X": [a], "Y": [a]}, {"Out": [V("sum", [-1, 2])]})
    g.fetch(b)
    g.fetch("sum")
    feeds, fetches = [o for o in g.block(0).ops if o.type == "feed"], g.block(0).ops[-2:]
    feeds[0].attrs[0].i, feeds[1].attrs[0].i = 1, 0
    fetches[0].attrs[0].i, fetches[1].attrs[0].i = 1, 0
    report = validated(g).report
    assert report.inputs == (TensorSpec("a", FP32, (-1, 2)), TensorSpec("b", DType.INT64, (-1,)))
    assert report.outputs == (TensorSpec("sum", FP32, (-1, 2)), TensorSpec("b", DType.INT64, (-1,)))


def test_validated_program_holds_types_ops_and_read_only_params() -> None:
    g = affine()
    result = validated(g)
    assert [op.op_type for op in result.ops] == [
        "feed",
        "elementwise_mul",
        "elementwise_add",
        "fetch",
    ]
    assert {n: (t.dtype, t.shape) for n, t in result.types.items()} == {
        "x": (FP32, (-1, 4)), "xs": (FP32, (-1, 4)), "y": (FP32, (-1, 4)),
        "scale": (FP32, (4,)), "bias": (FP32, (4,)),
    }  # fmt: skip
    assert sorted(result.params) == ["bias", "scale"]
    np.testing.assert_array_equal(result.params["scale"], g._params["scale"][1])
    assert not result.params["scale"].flags.writeable
    assert result.policy is not None


def test_only_validate_makes_a_validated_program() -> None:
    result = validated(affine())
    fields = {f.name: getattr(result, f.name) for f in dataclasses.fields(result)}
    with pytest.raises(TypeError, match=r"made by validator\.validate\(\) only"):
        ValidatedProgram(**{**fields, "_token": object()})


def test_bookkeeping_attrs_are_stripped() -> None:
    g = affine()
    for op in g.block(0).ops:
        for name, value in BOOKKEEPING_ATTRS.items():
            set_attr(op.attrs.add(), name, value)
    raw = g.program_bytes()
    assert b"/home/someone/secret/export.py" in raw
    result = validated(g)
    kept = {a.name for block in result.program.blocks for op in block.ops for a in op.attrs}
    assert kept == {"col"}
    assert not kept & COMMON_ATTRS
    assert b"secret" not in result.program.SerializeToString()


def test_every_independent_problem_is_reported_at_once() -> None:
    g = affine()
    g.var("w@GRAD", FP32, [4])  # a training var
    g.op("save_combine", {"X": ["scale"]}, {}, {"file_path": "/tmp/x"})
    g.node("elementwise_add", {"X": ["ghost"], "Y": ["x"]}, {"Out": [V("a", [-1, 4])]})
    g.node("elementwise_add", {"X": ["x"], "Y": ["bias"]}, {"Out": [V("b", [-1, 4])]}, {"axis": 7})
    g.node("softmax", {"X": ["y"]}, {"Out": [V("c", [-1, 4])]}, {"axis": -1, "bogus": 1})
    assert messages(g) == [
        "block 0: expected inference vars only, got gradient var 'w@GRAD' [TRAINING_PROGRAM]",
        "block 0, op 4 (save_combine): op 'save_combine' touches files, network, devices or user "
        "code and is never allowed [OP_FORBIDDEN]",
        "block 0, op 5 (elementwise_add): reads 'ghost', which is not fed, a parameter, or "
        "written by an earlier op [VAR_UNDEFINED]",
        "block 0, op 6 (elementwise_add): axis must be -1 or in [0, 1] for ranks 2 and 1, got 7 "
        "[AXIS_INVALID]",
        "block 0, op 7 (softmax): expected attributes from ['axis'], got unknown ['bogus'] "
        "[ATTR_UNKNOWN]",
    ]


def test_readers_of_a_failed_op_are_skipped_not_reported() -> None:
    g = affine()
    g.param("short", np.ones(3, np.float32))
    g.node("elementwise_add", {"X": ["x"], "Y": ["short"]}, {"Out": [V("bad", [-1, 4])]})
    g.node("relu", {"X": ["bad"]}, {"Out": [V("worse", [-1, 4])]})
    g.node("elementwise_mul", {"X": ["worse"], "Y": ["y"]}, {"Out": [V("worst", [-1, 4])]})
    g.fetch("worst")
    assert messages(g) == [
        "block 0, op 4 (elementwise_add): cannot broadcast [-1, 4] with [1, 3]: expected dims that "
        "are equal or 1, got 4 and 3 [SHAPE_MISMATCH]",
    ]


def test_readers_of_a_rejected_op_are_skipped_too() -> None:
    g = affine()
    g.op("my_custom_op", {"X": ["x"]}, {"Out": ["z"]})
    g.node("relu", {"X": ["z"]}, {"Out": [V("r", [-1, 4])]})
    g.fetch("r")
    assert messages(g) == [
        "block 0, op 4 (my_custom_op): expected a registered op type, got 'my_custom_op' "
        "[OP_UNKNOWN]",
    ]


def test_policy_allow_list() -> None:
    everything = frozenset({"feed", "fetch", "matmul_v2", "elementwise_add", "relu", "softmax"})
    assert validated(mlp(), Policy(allowed_ops=everything)).report.op_count == 8
    built = mlp().built()
    with pytest.raises(ValidationFailed) as info:
        validate(built.program, built.params, Policy(allowed_ops=everything - {"relu"}))
    assert [str(d) for d in info.value.diagnostics] == [
        "block 0, op 3 (relu): op 'relu' is not allowed by this tenant's policy [OP_NOT_ALLOWED]",
    ]


def test_no_policy_allows_a_forbidden_op() -> None:
    g = affine()
    g.op("py_func", {"X": ["x"]}, {"Out": ["x2"]}, {"forward_callable_id": 0})
    built = g.built()
    with pytest.raises(ValidationFailed) as info:
        validate(built.program, built.params, Policy(allowed_ops=REGISTRY.names() | {"py_func"}))
    assert info.value.codes == ["OP_FORBIDDEN"]


def test_a_program_without_parameters_needs_no_params_file() -> None:
    g = GraphBuilder()
    x = g.feed("x", FP32, [2, 3])
    g.node("relu", {"X": [x]}, {"Out": [V("r", [2, 3])]})
    g.fetch("r")
    assert g.params_bytes() is None
    assert validated(g).report.param_count == 0
    assert validate(g.program_bytes(), b"").report.param_count == 0


def test_0_d_feeds_and_params() -> None:
    g = GraphBuilder()
    x = g.feed("x", FP32, [])
    s = g.param("s", np.array(2.0, np.float32))
    g.node("elementwise_mul", {"X": [x], "Y": [s]}, {"Out": [V("y", [])]})
    g.fetch("y")
    result = validated(g)
    assert result.outputs == (TensorSpec("y", FP32, ()),)
    assert result.params["s"].shape == ()


def test_the_holder_vars_need_no_dense_tensor_desc() -> None:
    program = validated(affine()).program
    holders = {
        v.name: v.type.type for v in program.blocks[0].vars if not v.type.HasField("dense_tensor")
    }
    assert holders == {"feed": pb.VarType.FEED_MINIBATCH, "fetch": pb.VarType.FETCH_LIST}


def _stored_dims(g: GraphBuilder, name: str, dims: list[int]) -> GraphBuilder:
    var = next(v for v in g.program.blocks[0].vars if v.name == name)
    del var.type.dense_tensor.tensor.dims[:]
    var.type.dense_tensor.tensor.dims.extend(dims)
    return g


@pytest.mark.parametrize("stored", [[-1, 5], [-1, 4, 1], [-1, -12]])
def test_contradicting_intermediate_dims_are_a_warning_and_inference_wins(
    stored: list[int],
) -> None:
    # Paddle ignores stored intermediate dims and some of its rules record dims its kernels do
    # not produce (matmul_v2 batch broadcasting): the program is accepted with a warning.
    program = validated(_stored_dims(affine(), "y", stored))
    assert program.types["y"].shape == (-1, 4)
    warnings = [(w.code, w.var) for w in program.report.warnings]
    expected = [] if stored == [-1, -12] else [(Code.VAR_DIMS_MISMATCH, "y")]
    assert warnings == expected


def test_a_dim_an_op_pins_is_a_recorded_constraint_and_costed_at_its_size() -> None:
    # x[-1, -1] * scale[4]: the second dim is 4 or 1 (a broadcast), whatever the policy's
    # max_dynamic_dim; the report says so, and the figures are those of x[-1, 4].
    g = affine()
    _stored_dims(g, "x", [-1, -1])
    report = validated(g).report
    assert report.warnings == ()
    (constraint,) = report.dim_constraints
    assert (constraint.feed, constraint.axis) == ("x", 1)
    assert constraint.violation(3) == (
        "x dim 1 must be 4 or 1 (required by block 0, op 1 (elementwise_mul)), got 3"
    )
    assert constraint.violation(4) is None and constraint.violation(1) is None
    assert dict(report.dim_bounds) == {"B": DEFAULT_POLICY.max_batch, "D1": 4}
    exact = validated(affine()).report
    assert report.batch == exact.batch == DEFAULT_POLICY.max_batch
    assert report.flops_per_sample == exact.flops_per_sample
    assert report.peak_activation_bytes_per_sample == exact.peak_activation_bytes_per_sample


def test_dynamic_dims_pinned_to_different_sizes_are_each_recorded() -> None:
    # x[-1, -1] * scale[4] and z[-1, -1] + shift[3]: one constraint each.
    g = affine()
    _stored_dims(g, "x", [-1, -1])
    z = g.feed("z", DType.FP32, [-1, -1])
    shift = g.param("shift", np.ones(3, np.float32))
    g.node("elementwise_add", {"X": [z], "Y": [shift]}, {"Out": [V("zs", [-1, 3])]})
    g.fetch("zs")
    report = validated(g).report
    assert report.warnings == ()
    assert [(c.feed, c.axis, c.constraint.value) for c in report.dim_constraints] == [
        ("x", 1, 4),
        ("z", 1, 3),
    ]
    assert dict(report.dim_bounds) == {"B": DEFAULT_POLICY.max_batch, "D1": 4, "D2": 3}


def test_a_dim_no_size_satisfies_is_costed_with_an_upper_bound() -> None:
    # x[-1, -1] @ w[4, 2] and x + shift[3]: the product needs 4, the sum 3 or 1; no size of
    # x's second dim runs, so none is recorded; the figures are upper bounds, and a warning
    # says so (every request to it is refused by shape at run time).
    g = affine()
    _stored_dims(g, "x", [-1, -1])
    w = g.param("w", np.ones((4, 2), np.float32))
    g.node(
        "matmul_v2", {"X": ["x"], "Y": [w]}, {"Out": [V("product", [-1, 2])]},
        {"trans_x": False, "trans_y": False},
    )  # fmt: skip
    shift = g.param("shift", np.ones(3, np.float32))
    g.node("elementwise_add", {"X": ["x"], "Y": [shift]}, {"Out": [V("shifted", [-1, 3])]})
    g.fetch("product")
    g.fetch("shifted")
    program = validated(g)
    assert [w.code for w in program.report.warnings] == [Code.BUDGET_UPPER_BOUND]
    assert program.report.batch == DEFAULT_POLICY.max_batch
    assert program.report.peak_activation_bytes_per_sample > 0
