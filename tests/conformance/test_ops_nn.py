"""conv, pool and norm ops: programs Paddle builds are accepted, with the dims Paddle records."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

# Imported first: paddle_util switches Paddle to legacy programs before importing it.
pytest.importorskip("tests.conformance.paddle_util")

from graph_proto import framework_pb2 as pb
from tests.conformance.paddle_util import (
    build_and_save,
    dims_differences,
    paddle,
    recorded_types,
)
from validator import Policy, ValidationFailed, validate
from validator.ops import REGISTRY

pytestmark = pytest.mark.paddle

nn = paddle.nn

# (op type the layer must produce, layer factory, feed dims); bias_attr=False keeps conv programs
# to the conv op alone (Paddle adds the bias with reshape2 + elementwise_add).
LAYERS: dict[str, tuple[str, Callable[[], Any], list[int]]] = {
    "conv2d_dynamic_hw": ("conv2d", lambda: nn.Conv2D(3, 8, 3, padding=1, bias_attr=False), [-1, 3, -1, -1]),
    "conv2d_stride_dilation_4_paddings": (
        "conv2d",
        lambda: nn.Conv2D(3, 8, 3, stride=(2, 1), padding=[1, 2, 0, 1], dilation=2, bias_attr=False),
        [-1, 3, 17, 12],
    ),
    "conv2d_nhwc": (
        "conv2d",
        lambda: nn.Conv2D(3, 8, 3, stride=2, padding=1, data_format="NHWC", bias_attr=False),
        [-1, 9, -1, 3],
    ),
    "conv2d_same": ("conv2d", lambda: nn.Conv2D(3, 4, 3, stride=2, padding="SAME", bias_attr=False), [-1, 3, 7, 8]),
    "conv2d_valid": ("conv2d", lambda: nn.Conv2D(3, 4, 3, padding="VALID", bias_attr=False), [-1, 3, 7, -1]),
    "conv2d_groups": ("conv2d", lambda: nn.Conv2D(4, 6, 3, groups=2, bias_attr=False), [-1, 4, 9, 9]),
    "depthwise_conv2d": (
        "depthwise_conv2d",
        lambda: nn.Conv2D(4, 8, 3, stride=2, padding=1, groups=4, bias_attr=False),
        [-1, 4, 9, 9],
    ),
    "depthwise_conv2d_same_dynamic": (
        "depthwise_conv2d",
        lambda: nn.Conv2D(4, 4, 3, stride=2, padding="SAME", dilation=2, groups=4, bias_attr=False),
        [-1, 4, -1, 10],
    ),
    "conv2d_transpose": ("conv2d_transpose", lambda: nn.Conv2DTranspose(3, 6, 3, stride=2, bias_attr=False), [-1, 3, 5, 5]),
    "conv2d_transpose_dynamic": (
        "conv2d_transpose",
        lambda: nn.Conv2DTranspose(3, 6, 3, stride=2, padding=1, bias_attr=False),
        [-1, 3, -1, -1],
    ),
    "conv2d_transpose_output_padding": (
        "conv2d_transpose",
        lambda: nn.Conv2DTranspose(3, 6, 3, stride=2, padding=1, output_padding=1, bias_attr=False),
        [-1, 3, 5, 4],
    ),
    "conv2d_transpose_same_nhwc": (
        "conv2d_transpose",
        lambda: nn.Conv2DTranspose(3, 6, 3, stride=2, padding="SAME", data_format="NHWC", bias_attr=False),
        [-1, 5, -1, 3],
    ),
    "conv2d_transpose_groups_dilation": (
        "conv2d_transpose",
        lambda: nn.Conv2DTranspose(4, 6, 3, stride=2, dilation=2, padding=[1, 0, 2, 1], groups=2, bias_attr=False),
        [-1, 4, 5, 6],
    ),
    "depthwise_conv2d_transpose": (
        "depthwise_conv2d_transpose",
        lambda: nn.Conv2DTranspose(4, 4, 3, stride=2, groups=4, bias_attr=False),
        [-1, 4, 5, -1],
    ),
    "max_pool2d_ceil": ("pool2d", lambda: nn.MaxPool2D(3, 2, ceil_mode=True), [-1, 3, 8, 9]),
    "max_pool2d_window_past_the_end": ("pool2d", lambda: nn.MaxPool2D(3, 2), [-1, 3, 2, 6]),
    "max_pool2d_dynamic": ("pool2d", lambda: nn.MaxPool2D(2, 2), [-1, 3, -1, -1]),
    "max_pool2d_nhwc": ("pool2d", lambda: nn.MaxPool2D(3, 2, padding=1, ceil_mode=True, data_format="NHWC"), [-1, 7, -1, 3]),
    "avg_pool2d_same": ("pool2d", lambda: nn.AvgPool2D(2, 2, padding="SAME", exclusive=False), [-1, 3, 7, 7]),
    "avg_pool2d_4_paddings": ("pool2d", lambda: nn.AvgPool2D(3, 1, padding=[0, 1, 1, 2]), [-1, 3, 7, 7]),
    "avg_pool2d_ceil": ("pool2d", lambda: nn.AvgPool2D(3, 2, ceil_mode=True, exclusive=False), [-1, 3, 9, -1]),
    "avg_pool2d_valid": ("pool2d", lambda: nn.AvgPool2D(2, 3, padding="VALID"), [-1, 3, 8, 7]),
    "adaptive_avg_pool2d_uneven": ("pool2d", lambda: nn.AdaptiveAvgPool2D((3, 5)), [-1, 3, 8, 8]),
    "adaptive_avg_pool2d_dynamic": ("pool2d", lambda: nn.AdaptiveAvgPool2D((3, 5)), [-1, 3, -1, -1]),
    "adaptive_avg_pool2d_nhwc": ("pool2d", lambda: nn.AdaptiveAvgPool2D(1, data_format="NHWC"), [-1, 7, 7, 3]),
    "batch_norm": ("batch_norm", lambda: nn.BatchNorm2D(3), [-1, 3, -1, -1]),
    "batch_norm_nhwc": ("batch_norm", lambda: nn.BatchNorm2D(3, data_format="NHWC"), [-1, -1, -1, 3]),
    "batch_norm_global_stats": ("batch_norm", lambda: nn.BatchNorm2D(3, use_global_stats=True), [-1, 3, 4, 4]),
    "batch_norm_no_affine": ("batch_norm", lambda: nn.BatchNorm2D(3, weight_attr=False, bias_attr=False), [-1, 3, 4, 4]),
    "batch_norm_1d": ("batch_norm", lambda: nn.BatchNorm1D(5), [-1, 5]),
    "batch_norm_1d_nlc": ("batch_norm", lambda: nn.BatchNorm1D(5, data_format="NLC"), [-1, 7, 5]),
    "layer_norm": ("layer_norm", lambda: nn.LayerNorm(8), [-1, 3, 8]),
    "layer_norm_2_dims": ("layer_norm", lambda: nn.LayerNorm([3, 8]), [-1, 3, 8]),
    "layer_norm_no_affine": ("layer_norm", lambda: nn.LayerNorm(8, weight_attr=False, bias_attr=False), [-1, -1, 8]),
    "group_norm": ("group_norm", lambda: nn.GroupNorm(2, 4), [-1, 4, -1, -1]),
    "group_norm_nhwc": ("group_norm", lambda: nn.GroupNorm(2, 4, data_format="NHWC"), [-1, 5, 5, 4]),
    "group_norm_no_affine_3d": ("group_norm", lambda: nn.GroupNorm(2, 4, weight_attr=False, bias_attr=False), [-1, 4, 5]),
}  # fmt: skip


def _layer_program(make: Callable[[], Any], shape: list[int]) -> Callable[[], Any]:
    def build() -> tuple[list[Any], list[Any]]:
        x = paddle.static.data("x", shape, "float32")
        return [x], [make()(x)]

    return build


def _op_types(program: bytes) -> set[str]:
    return {op.type for op in pb.ProgramDesc.FromString(program).blocks[0].ops}


@pytest.mark.parametrize(("op_type", "make", "shape"), LAYERS.values(), ids=list(LAYERS))
def test_layer_matches_paddle(op_type: str, make: Callable[[], Any], shape: list[int]) -> None:
    saved = build_and_save(_layer_program(make, shape))
    assert op_type in _op_types(saved.program)
    validated = validate(saved.program, saved.params)
    assert dims_differences(validated, saved.program) == []


def _global_pool() -> tuple[list[Any], list[Any]]:
    # paddle.nn has no global_pooling layer any more; fluid's pool2d(global_pooling=True) wrote this.
    x = paddle.static.data("x", [-1, 3, -1, 6], "float32")
    helper = paddle.base.layer_helper.LayerHelper("pool2d")
    out = helper.create_variable_for_type_inference("float32")
    attrs = {"pooling_type": "avg", "ksize": [1, 1], "global_pooling": True}
    helper.append_op(type="pool2d", inputs={"X": [x]}, outputs={"Out": [out]}, attrs=attrs)
    return [x], [out]


def _conv_bn_pool() -> tuple[list[Any], list[Any]]:
    x = paddle.static.data("x", [-1, 3, -1, -1], "float32")
    y = nn.Conv2D(3, 8, 3, stride=2, padding=1, bias_attr=False)(x)
    y = nn.BatchNorm2D(8)(y)
    y = nn.MaxPool2D(3, 2, padding=1)(y)
    y = nn.Conv2D(8, 8, 3, padding=1, groups=8, bias_attr=False)(y)
    return [x], [nn.AdaptiveAvgPool2D(1)(y)]


@pytest.mark.parametrize("build", [_global_pool, _conv_bn_pool], ids=lambda f: f.__name__)
def test_program_matches_paddle(build: Callable[[], Any]) -> None:
    saved = build_and_save(build)
    validated = validate(saved.program, saved.params)
    assert dims_differences(validated, saved.program) == []


def test_conv2d_transpose_output_padding_on_unknown_size() -> None:
    """Paddle's compile-time rule adds output_padding to -1 and records 0; graphgate keeps -1."""
    saved = build_and_save(
        _layer_program(
            lambda: nn.Conv2DTranspose(
                3, 6, 3, stride=2, padding=1, output_padding=1, bias_attr=False
            ),
            [-1, 3, -1, 5],
        )
    )
    validated = validate(saved.program, saved.params)
    (out,) = saved.fetches
    assert recorded_types(saved.program)[out][1] == (-1, 6, 0, 10)
    assert validated.types[out].shape == (-1, 6, -1, 10)
    assert dims_differences(validated, saved.program, exempt=[out]) == []


@pytest.mark.skipif(
    not {"reshape2", "elementwise_add"} <= REGISTRY.names(),
    reason="needs reshape2, elementwise_add",
)
def test_conv2d_with_bias_matches_paddle() -> None:
    saved = build_and_save(_layer_program(lambda: nn.Conv2D(3, 8, 1), [-1, 3, -1, -1]))
    validated = validate(saved.program, saved.params)
    assert dims_differences(validated, saved.program) == []


def test_group_norm_takes_unknown_channels_from_scale() -> None:
    saved = build_and_save(_layer_program(lambda: nn.GroupNorm(2, 4), [-1, -1, 5, 5]))
    # NOTE: budgets bind every unknown non-batch feed dim to max_dynamic_dim, which must then
    # agree with Scale's 4 channels (a -1 channel constrained by parameters is reported).
    validated = validate(saved.program, saved.params, Policy(max_dynamic_dim=4))
    (out,) = saved.fetches
    assert validated.types[out].shape == (-1, 4, 5, 5)
    assert dims_differences(validated, saved.program) == []


INSTANCE_NORMS = {
    "instance_norm": (lambda: nn.InstanceNorm2D(3), [-1, 3, -1, -1]),
    "instance_norm_1d_no_affine": (
        lambda: nn.InstanceNorm1D(3, weight_attr=False, bias_attr=False),
        [-1, 3, 6],
    ),
    "instance_norm_3d": (lambda: nn.InstanceNorm3D(2), [2, 2, 3, 4, 5]),
}


def _without_orphan_vars(program: bytes) -> bytes:
    """Drops VarDescs that no op reads or writes."""
    desc = pb.ProgramDesc.FromString(program)
    block = desc.blocks[0]
    used = {a for op in block.ops for v in (*op.inputs, *op.outputs) for a in v.arguments}
    kept = [v for v in block.vars if v.name in used or v.persistable]
    del block.vars[:]
    block.vars.extend(kept)
    return desc.SerializeToString()


@pytest.mark.parametrize(("make", "shape"), INSTANCE_NORMS.values(), ids=list(INSTANCE_NORMS))
def test_instance_norm_matches_paddle(make: Callable[[], Any], shape: list[int]) -> None:
    saved = build_and_save(_layer_program(make, shape))
    # NOTE: Paddle keeps the pruned SavedMean/SavedVariance VarDescs, with dims N*C = [-3] when
    # N is -1; see test_instance_norm_orphan_vars_with_dims_below_minus_one.
    program = _without_orphan_vars(saved.program)
    validated = validate(program, saved.params)
    assert dims_differences(validated, program) == []


@pytest.mark.xfail(strict=True, raises=ValidationFailed, reason="core rejects VarDesc dims < -1")
def test_instance_norm_orphan_vars_with_dims_below_minus_one() -> None:
    saved = build_and_save(_layer_program(lambda: nn.InstanceNorm2D(3), [-1, 3, -1, -1]))
    assert sorted(d for _, d in recorded_types(saved.program).values() if d == (-3,)) == [(-3,)] * 2
    validate(saved.program, saved.params)
