"""conv, pool and norm ops: programs Paddle builds are accepted, with the dims Paddle records.

This module holds the family's table, CASES, which test_ops_parity.py checks (dims and outputs
against Paddle's); test_ops_nn.py has the family's other tests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, Final

from graph_proto import framework_pb2 as pb
from tests.conformance.op_cases import Case, Size, sizes
from tests.conformance.paddle_util import (
    Saved,
    paddle,
)

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


def layer_program(make: Callable[[], Any], shape: list[int]) -> Callable[[], Any]:
    def build() -> tuple[list[Any], list[Any]]:
        x = paddle.static.data("x", shape, "float32")
        return [x], [make()(x)]

    return build


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


# Numeric parity: graphgate's executor against Paddle's Executor --------------------------------

Build = Callable[[], tuple[list[Any], list[Any]]]


def _pool2d(shape: list[int], **attrs: Any) -> Build:
    """A pool2d OpDesc as fluid wrote it (nn has no adaptive max or global layer on pool2d)."""

    def build() -> tuple[list[Any], list[Any]]:
        x = paddle.static.data("x", shape, "float32")
        helper = paddle.base.layer_helper.LayerHelper("pool2d")
        out = helper.create_variable_for_type_inference("float32")
        full = {"ksize": [1, 1]} | attrs
        helper.append_op(type="pool2d", inputs={"X": [x]}, outputs={"Out": [out]}, attrs=full)
        return [x], [out]

    return build


def _with_output_size(*args: Any, output_size: list[int], **kwargs: Any) -> Callable[[], Any]:
    def make() -> Any:
        layer = nn.Conv2DTranspose(*args, **(kwargs | {"bias_attr": False}))
        return lambda x: layer(x, output_size=output_size)

    return make


# Lowering variants beyond LAYERS: name -> (program, sizes fed to its -1 spatial dims).
PARITY: dict[str, tuple[str, Build, tuple[int, ...]]] = {
    "conv2d_same_stride_over_kernel_dynamic": ("conv2d",
        layer_program(lambda: nn.Conv2D(3, 4, 1, stride=3, padding="SAME", bias_attr=False), [-1, 3, -1, -1]), (7, 9, 3)),
    "conv2d_nhwc_asymmetric_dilated_groups": ("conv2d",
        layer_program(lambda: nn.Conv2D(4, 6, 3, stride=(1, 2), padding=[2, 0, 1, 3], dilation=(2, 1), groups=2,
                                 data_format="NHWC", bias_attr=False), [-1, -1, -1, 4]), (5, 8)),
    "conv2d_transpose_output_size_past_the_end": ("conv2d_transpose",
        layer_program(_with_output_size(3, 4, 3, stride=3, output_size=[17, 16]), [-1, 3, 5, 5]), (5,)),
    "conv2d_transpose_output_size_asymmetric": ("conv2d_transpose",
        layer_program(_with_output_size(3, 4, 3, stride=2, padding=[1, 0, 0, 2], output_size=[11, 10]),
               [-1, 3, 5, 5]), (1,)),
    "conv2d_transpose_same_stride_over_kernel_dynamic": ("conv2d_transpose",
        layer_program(lambda: nn.Conv2DTranspose(3, 4, 2, stride=3, padding="SAME", bias_attr=False),
               [-1, 3, -1, -1]), (5, 4)),
    "conv2d_transpose_nhwc_asymmetric_output_padding": ("conv2d_transpose",
        layer_program(lambda: nn.Conv2DTranspose(4, 4, 3, stride=3, padding=[0, 1, 2, 0], output_padding=2, groups=2,
                                          data_format="NHWC", bias_attr=False), [-1, -1, 5, 4]), (4, 6)),
    "conv2d_transpose_output_padding_dynamic": ("conv2d_transpose",
        layer_program(lambda: nn.Conv2DTranspose(3, 6, 3, stride=2, padding=1, output_padding=1, bias_attr=False),
               [-1, 3, -1, 5]), (5, 4)),
    "conv2d_transpose_valid": ("conv2d_transpose",
        layer_program(lambda: nn.Conv2DTranspose(3, 4, 3, stride=2, padding="VALID", bias_attr=False),
                       [-1, 3, -1, 4]), (5, 2)),
    "depthwise_conv2d_nhwc_asymmetric": ("depthwise_conv2d",
        layer_program(lambda: nn.Conv2D(4, 8, 3, padding=[1, 2, 0, 1], groups=4, data_format="NHWC",
                                         bias_attr=False), [-1, -1, -1, 4]), (5, 3)),
    "depthwise_conv2d_transpose_nhwc_same": ("depthwise_conv2d_transpose",
        layer_program(lambda: nn.Conv2DTranspose(4, 4, 3, stride=2, padding="SAME", groups=4, data_format="NHWC",
                                                  bias_attr=False), [-1, -1, -1, 4]), (5, 2)),
    "max_pool2d_padded": ("pool2d", layer_program(lambda: nn.MaxPool2D(3, 2, padding=1), [-1, 3, 10, 9]), (1,)),
    "avg_pool2d_exclusive_padded": ("pool2d", layer_program(lambda: nn.AvgPool2D(3, 1, padding=1), [-1, 3, 6, 7]), (1,)),
    "max_pool2d_same_dynamic": ("pool2d", layer_program(lambda: nn.MaxPool2D(3, 2, padding="SAME"), [-1, 3, -1, -1]), (7, 4, 1)),
    "max_pool2d_4_paddings_ceil_nhwc": ("pool2d",
        layer_program(lambda: nn.MaxPool2D(3, 2, padding=[0, 1, 1, 2], ceil_mode=True, data_format="NHWC"),
               [-1, -1, -1, 3]), (6, 4, 2)),
    "avg_pool2d_exclusive_padded_dynamic": ("pool2d",
        layer_program(lambda: nn.AvgPool2D(3, 2, padding=1), [-1, 3, -1, -1]), (7, 6, 2)),
    "avg_pool2d_same_exclusive_dynamic": ("pool2d",
        layer_program(lambda: nn.AvgPool2D(3, 2, padding="SAME"), [-1, 3, -1, -1]), (7, 4, 1)),
    "avg_pool2d_same_inclusive_dynamic": ("pool2d",
        layer_program(lambda: nn.AvgPool2D(2, 2, padding="SAME", exclusive=False), [-1, 3, -1, -1]), (7, 4, 1)),
    "avg_pool2d_4_paddings_inclusive_ceil": ("pool2d",
        layer_program(lambda: nn.AvgPool2D(3, 2, padding=[0, 1, 1, 2], ceil_mode=True, exclusive=False),
               [-1, 3, -1, -1]), (6, 4, 2)),
    "avg_pool2d_inclusive_window_past_the_end_nhwc": ("pool2d",
        layer_program(lambda: nn.AvgPool2D(3, 2, ceil_mode=True, exclusive=False, data_format="NHWC"),
               [-1, 2, -1, 3]), (6, 5)),
    "adaptive_avg_pool2d_larger_than_input": ("pool2d", layer_program(lambda: nn.AdaptiveAvgPool2D((5, 7)), [-1, 3, 3, 4]), (1,)),
    "adaptive_avg_pool2d_larger_dynamic": ("pool2d",
        layer_program(lambda: nn.AdaptiveAvgPool2D((7, 9)), [-1, 3, -1, -1]), (5, 3, 12)),
    "adaptive_avg_pool2d_half_dynamic": ("pool2d",
        layer_program(lambda: nn.AdaptiveAvgPool2D((1, 4)), [-1, 3, -1, -1]), (6, 9)),
    "adaptive_avg_pool2d_nhwc_uneven": ("pool2d",
        layer_program(lambda: nn.AdaptiveAvgPool2D((3, 2), data_format="NHWC"), [-1, -1, 7, 3]), (5, 8)),
    "adaptive_avg_pool2d_divisible": ("pool2d", layer_program(lambda: nn.AdaptiveAvgPool2D((2, 3)), [-1, 3, 8, 9]), (1,)),
    "adaptive_max_pool2d_uneven": ("pool2d", _pool2d([-1, 3, 8, 8], pooling_type="max", ksize=[3, 5], adaptive=True), (1,)),
    "adaptive_max_pool2d_larger_dynamic": ("pool2d",
        _pool2d([-1, 2, -1, -1], pooling_type="max", ksize=[9, 2], adaptive=True), (4, 5, 13)),
    "adaptive_max_pool2d_1x1_dynamic": ("pool2d",
        _pool2d([-1, 2, -1, -1], pooling_type="max", ksize=[1, 1], adaptive=True), (4, 7)),
    "adaptive_max_pool2d_nhwc": ("pool2d",
        _pool2d([-1, 6, 7, 2], pooling_type="max", ksize=[4, 3], adaptive=True, data_format="NHWC"), (1,)),
    "global_max_pool2d_dynamic": ("pool2d",
        _pool2d([-1, 2, -1, -1], pooling_type="max", global_pooling=True, paddings=[1, 1]), (4, 7)),
    "global_adaptive_pool2d_is_identity": ("pool2d",
        _pool2d([-1, 2, -1, 5], pooling_type="avg", global_pooling=True, adaptive=True), (3,)),
    "global_adaptive_max_pool2d": ("pool2d",
        _pool2d([-1, 2, 4, 5], pooling_type="max", global_pooling=True, adaptive=True), (1,)),
    "batch_norm_3d": ("batch_norm", layer_program(lambda: nn.BatchNorm3D(3), [-1, 3, 2, -1, 3]), (4, 1)),
    "batch_norm_3d_ndhwc": ("batch_norm", layer_program(lambda: nn.BatchNorm3D(3, data_format="NDHWC"), [-1, 2, -1, 3, 3]), (4, 1)),
    "layer_norm_3_dims": ("layer_norm", layer_program(lambda: nn.LayerNorm([3, 4, 5]), [-1, 3, 4, 5]), (1,)),
    "layer_norm_scale_only": ("layer_norm", layer_program(lambda: nn.LayerNorm(8, bias_attr=False), [-1, -1, 8]), (3, 1)),
    "group_norm_nhwc_dynamic": ("group_norm", layer_program(lambda: nn.GroupNorm(3, 6, data_format="NHWC"), [-1, -1, -1, 6]), (4, 1)),
    "group_norm_5d": ("group_norm", layer_program(lambda: nn.GroupNorm(2, 4), [-1, 4, 3, -1, 2]), (2, 5)),
    "conv_bn_pool": ("pool2d", _conv_bn_pool, (9, 16, 5)),
    "global_avg_pool": ("pool2d", _global_pool, (5, 2)),
}  # fmt: skip


# NOTE: Paddle 3.3.1's own Executor fails on batch_norm without Scale and Bias ("Invalid dimension
# to be accessed"); test_batch_norm_without_scale_and_bias_matches_numpy covers it instead.
PADDLE_FAILS: Final = frozenset({"batch_norm_no_affine"})
LAYER_SIZES: Final = (5, 7, 3)
# PARITY programs whose dims are checked too (the others are lowering variants only).
PARITY_WITH_DIMS: Final = frozenset({"conv_bn_pool", "global_avg_pool"})

INSTANCE_NORM_PARITY = INSTANCE_NORMS | {
    "instance_norm_2d_input": (lambda: nn.InstanceNorm1D(3), [-1, 3])
}


def _spatial(*dynamics: int) -> tuple[Size, ...]:
    """Batch 1 and 3, each -1 spatial dim fed as each of `dynamics`."""
    return sizes((1, 3), dynamics, range(len(dynamics)))


def _without_orphans(saved: Saved) -> Saved:
    # NOTE: Paddle keeps the pruned SavedMean/SavedVariance VarDescs, with dims N*C = [-3] when
    # N is -1; see test_instance_norm_orphan_vars_with_dims_below_minus_one.
    return replace(saved, program=_without_orphan_vars(saved.program))


CASES: Final = (
    {
        name: Case(
            op_type,
            layer_program(make, shape),
            sizes=_spatial(*LAYER_SIZES),
            random_params=True,
            outputs=name not in PADDLE_FAILS,
        )
        for name, (op_type, make, shape) in LAYERS.items()
    }
    | {
        name: Case(
            op_type,
            build,
            sizes=_spatial(*dynamics),
            random_params=True,
            dims=name in PARITY_WITH_DIMS,
        )
        for name, (op_type, build, dynamics) in PARITY.items()
    }
    | {
        name: Case(
            "instance_norm",
            layer_program(make, shape),
            sizes=_spatial(5, 2),
            random_params=True,
            prepare=_without_orphans,
            dims=name in INSTANCE_NORMS,
        )
        for name, (make, shape) in INSTANCE_NORM_PARITY.items()
    }
)
