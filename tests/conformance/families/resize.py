"""pad3d, nearest/bilinear interpolation, pixel_shuffle and flip built by real Paddle: accepted,
with the dims Paddle records (-1 spatial dims, size and scale tensors included).

This module holds the family's table, CASES, which test_ops_parity.py checks (dims and outputs
against Paddle's); test_ops_resize.py has the family's other tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import numpy as np

from tests.conformance.op_cases import Build, Case, program, sizes
from tests.conformance.paddle_util import (
    install_legacy_compat,
    paddle,
)
from validator import Policy
from validator.ops import FAMILIES, Registry, spatial

install_legacy_compat()

F: Any = paddle.nn.functional  # its stubs reject the float scales and tensors Paddle accepts

# NOTE: pad3d, pixel_shuffle and flip live in validator/ops/spatial.py; until that family is
# listed in validator/ops/__init__.py, it is added here.
# Budgets bind unknown non-batch dims to max_dynamic_dim: kept small for 5-D -1 volumes.
POLICY = Policy(max_dynamic_dim=16)
REGISTRY = Registry(*(f.OPS for f in FAMILIES), *(() if spatial in FAMILIES else (spatial.OPS,)))


def image(fn: Callable[[Any], Any], shape: list[int]) -> Build:
    return program(fn, (shape, "float32"))


def _raw_interp(op_type: str, shape: list[int], out_size: int = 0, **attrs: Any) -> Build:
    """An interp op appended as written, for attribute mixes F.interpolate never writes
    (nearest with align_corners, OutSize next to a scale)."""

    def build() -> tuple[list[Any], list[Any]]:
        feeds = [paddle.static.data("x0", shape, "float32")]
        inputs = {"X": feeds[:1]}
        if out_size:
            feeds.append(paddle.static.data("x1", [out_size], "int32"))
            inputs["OutSize"] = feeds[1:]
        helper = paddle.base.layer_helper.LayerHelper(op_type)
        out = helper.create_variable_for_type_inference("float32")
        method = op_type.split("_")[0]
        defaults = {"out_h": -1, "out_w": -1, "interp_method": method, "align_mode": 1}
        helper.append_op(
            type=op_type, inputs=inputs, outputs={"Out": [out]}, attrs={**defaults, **attrs}
        )
        return feeds, [out]

    return build


N4 = [-1, 3, 8, 8]
N5 = [-1, 3, 4, 8, 8]

# name: (op type the program must contain, program)
PROGRAMS: dict[str, tuple[str, Build]] = {
    "pad4d_constant": ("pad3d", image(lambda x: F.pad(x, [1, 2, 0, 1], value=2.0), N4)),
    "pad4d_reflect": ("pad3d", image(lambda x: F.pad(x, [1, 1, 2, 2], mode="reflect"), N4)),
    "pad4d_replicate": ("pad3d", image(lambda x: F.pad(x, [3, 0, 1, 1], mode="replicate"), N4)),
    "pad4d_circular": ("pad3d", image(lambda x: F.pad(x, [1, 1, 1, 1], mode="circular"), N4)),
    "pad4d_nhwc": ("pad3d", image(lambda x: F.pad(x, [1, 2, 3, 4], value=-1.0, data_format="NHWC"), [-1, 8, 8, 3])),
    "pad4d_dynamic_hw": ("pad3d", image(lambda x: F.pad(x, [1, 2, 0, 1], mode="replicate"), [-1, 3, -1, -1])),
    "pad5d_constant": ("pad3d", image(lambda x: F.pad(x, [1, 2, 0, 1, 1, 1], value=0.5), N5)),
    "pad5d_reflect": ("pad3d", image(lambda x: F.pad(x, [1, 1, 2, 2, 3, 0], mode="reflect"), N5)),
    "pad5d_replicate_ndhwc": ("pad3d", image(lambda x: F.pad(x, [1, 2, 0, 1, 1, 1], mode="replicate", data_format="NDHWC"), [-1, 4, 8, 8, 3])),
    "pad5d_dynamic_depth": ("pad3d", image(lambda x: F.pad(x, [1, 2, 0, 1, 1, 1], mode="reflect"), [-1, 3, -1, 8, 8])),
    "pad5d_paddings_tensor": ("pad3d", program(lambda x, p: F.pad(x, p, value=1.0), (N5, "float32"), ([6], "int32"))),
    "pad5d_constant_paddings_tensor": ("pad3d", image(lambda x: F.pad(x, paddle.full([6], 2, "int32")), N5)),
    "nearest_size": ("nearest_interp_v2", image(lambda x: F.interpolate(x, size=[16, 12]), N4)),
    "nearest_scale": ("nearest_interp_v2", image(lambda x: F.interpolate(x, scale_factor=[1.5, 0.5]), N4)),
    "nearest_scale_truncates": ("nearest_interp_v2", image(lambda x: F.interpolate(x, scale_factor=1.3), [-1, 3, 7, 9])),
    "nearest_nhwc": ("nearest_interp_v2", image(lambda x: F.interpolate(x, size=[5, 6], data_format="NHWC"), [-1, 8, 8, 3])),
    "nearest_dynamic_hw": ("nearest_interp_v2", image(lambda x: F.interpolate(x, scale_factor=2), [-1, 3, -1, 8])),
    "nearest_5d_scale": ("nearest_interp_v2", image(lambda x: F.interpolate(x, scale_factor=2), N5)),
    "nearest_5d_size_ndhwc": ("nearest_interp_v2", image(lambda x: F.interpolate(x, size=[2, 3, 4], data_format="NDHWC"), [-1, 4, 8, 8, 3])),
    "nearest_out_size_tensor": ("nearest_interp_v2", program(lambda x, s: F.interpolate(x, size=s), (N4, "float32"), ([2], "int32"))),
    "nearest_size_tensor_list": ("nearest_interp_v2", program(lambda x, s: F.interpolate(x, size=[s, 5]), (N4, "float32"), ([1], "int32"))),
    "nearest_scale_tensor": ("nearest_interp_v2", program(lambda x, s: F.interpolate(x, scale_factor=s), (N4, "float32"), ([1], "float32"))),
    "nearest_size_from_shape": ("nearest_interp_v2", image(lambda x: F.interpolate(x, size=paddle.shape(x)[2:] * 2), [2, 3, 8, 6])),
    "bilinear_size": ("bilinear_interp_v2", image(lambda x: F.interpolate(x, size=[16, 12], mode="bilinear"), N4)),
    "bilinear_align_corners": ("bilinear_interp_v2", image(lambda x: F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=True), N4)),
    "bilinear_align_mode_1": ("bilinear_interp_v2", image(lambda x: F.interpolate(x, scale_factor=[1.5, 0.5], mode="bilinear", align_mode=1), N4)),
    "bilinear_nhwc": ("bilinear_interp_v2", image(lambda x: F.interpolate(x, size=[16, 12], mode="bilinear", data_format="NHWC"), [-1, 8, 8, 3])),
    "bilinear_dynamic_hw": ("bilinear_interp_v2", image(lambda x: F.interpolate(x, scale_factor=2.0, mode="bilinear"), [-1, 3, -1, -1])),
    "bilinear_upsample_layer": ("bilinear_interp_v2", image(lambda x: paddle.nn.Upsample(scale_factor=2, mode="bilinear")(x), N4)),
    "pixel_shuffle": ("pixel_shuffle", image(lambda x: paddle.nn.PixelShuffle(2)(x), [-1, 8, 3, 3])),
    "pixel_shuffle_nhwc": ("pixel_shuffle", image(lambda x: paddle.nn.PixelShuffle(3, "NHWC")(x), [-1, 3, 3, 18])),
    "pixel_shuffle_dynamic_hw": ("pixel_shuffle", image(lambda x: F.pixel_shuffle(x, 2), [-1, 8, -1, -1])),
    "flip": ("flip", image(lambda x: paddle.flip(x, [0, 2]), [-1, 8, 3, 3])),
    "flip_negative_axis": ("flip", image(lambda x: paddle.flip(x, -1), [-1, -1, 3])),
    "flip_int64": ("flip", program(lambda x: paddle.flip(x, [1]), ([-1, 5], "int64"))),
}  # fmt: skip

# More variants for numeric parity (every interpolation trap, pad mode and dtype). The raw
# OutSize + scale programs are left out of the dims check: Paddle records the size the scale
# implies there although OutSize overrides it at run time.
PARITY_PROGRAMS: dict[str, tuple[str, Build]] = {
    **PROGRAMS,
    "pad5d_int64_constant": ("pad3d", program(lambda x: F.pad(x, [1, 2, 0, 1, 1, 1], value=-1.5), ([-1, 3, 4, 4, 4], "int64"))),
    "pad5d_circular_wider_than_axis": ("pad3d", image(lambda x: F.pad(x, [9, 1, 0, 5, 6, 1], mode="circular"), [-1, 3, 4, 4, 4])),
    "pad5d_circular_ndhwc": ("pad3d", image(lambda x: F.pad(x, [1, 2, 3, 0, 1, 1], mode="circular", data_format="NDHWC"), [-1, 4, 4, 4, 3])),
    "pad5d_reflect_paddings_tensor": ("pad3d", program(lambda x, p: F.pad(x, p, mode="reflect"), (N5, "float32"), ([6], "int32"))),
    "pad5d_replicate_paddings_tensor": ("pad3d", program(lambda x, p: F.pad(x, p, mode="replicate"), (N5, "float32"), ([6], "int64"))),
    "pad5d_circular_paddings_tensor": ("pad3d", program(lambda x, p: F.pad(x, p, mode="circular"), (N5, "float32"), ([6], "int64"))),
    "nearest_align_corners": ("nearest_interp_v2", _raw_interp("nearest_interp_v2", N4, out_h=13, out_w=5, align_corners=True)),
    "nearest_align_corners_5d": ("nearest_interp_v2", _raw_interp("nearest_interp_v2", N5, out_d=7, out_h=3, out_w=16, align_corners=True)),
    "nearest_scale_dynamic_double_product": ("nearest_interp_v2", image(lambda x: F.interpolate(x, scale_factor=[1.3, 0.7]), [-1, 3, -1, -1])),
    "nearest_scale_near_one_dynamic": ("nearest_interp_v2", image(lambda x: F.interpolate(x, scale_factor=[1.05, 1.02]), [-1, 3, -1, -1])),
    "nearest_out_size_and_scale": ("nearest_interp_v2", _raw_interp("nearest_interp_v2", N4, out_size=2, scale=[2.0, 1.5])),
    "nearest_int64": ("nearest_interp_v2", program(lambda x: F.interpolate(x, size=[7, 13]), (N4, "int64"))),
    "bilinear_align_corners_size": ("bilinear_interp_v2", image(lambda x: F.interpolate(x, size=[5, 13], mode="bilinear", align_corners=True), N4)),
    "bilinear_align_mode_1_size": ("bilinear_interp_v2", image(lambda x: F.interpolate(x, size=[17, 6], mode="bilinear", align_mode=1), N4)),
    "bilinear_scale_tensor": ("bilinear_interp_v2", program(lambda x, s: F.interpolate(x, scale_factor=s, mode="bilinear"), (N4, "float32"), ([2], "float32"))),
    "bilinear_out_size_tensor": ("bilinear_interp_v2", program(lambda x, s: F.interpolate(x, size=s, mode="bilinear"), (N4, "float32"), ([2], "int32"))),
    "bilinear_size_tensor_list": ("bilinear_interp_v2", program(lambda x, s: F.interpolate(x, size=[9, s], mode="bilinear", align_corners=True), (N4, "float32"), ([1], "int32"))),
    "bilinear_scale_near_one_dynamic": ("bilinear_interp_v2", image(lambda x: F.interpolate(x, scale_factor=1.05, mode="bilinear"), [-1, 3, -1, -1])),
    "bilinear_out_size_and_scale": ("bilinear_interp_v2", _raw_interp("bilinear_interp_v2", N4, out_size=2, scale=[2.0, 1.5], align_mode=0)),
    "bilinear_uint8": ("bilinear_interp_v2", program(lambda x: F.interpolate(x, size=[11, 7], mode="bilinear"), (N4, "uint8"))),
    "bilinear_uint8_flat": ("bilinear_interp_v2", program(lambda x: F.interpolate(x, size=[11, 7], mode="bilinear"), ([2, 3, 4, 4], "uint8"))),
    "bilinear_float64": ("bilinear_interp_v2", program(lambda x: F.interpolate(x, scale_factor=1.7, mode="bilinear"), (N4, "float64"))),
    # Source coordinates in the hundreds, where float32 rounds Paddle's steps and onnxruntime's
    # Resize differently: ratios that are not a power of two (the gathers replay Paddle's steps)
    "bilinear_large_upsample": ("bilinear_interp_v2", image(lambda x: F.interpolate(x, size=[509, 1021], mode="bilinear"), [-1, 2, 37, 61])),
    "bilinear_large_align_corners": ("bilinear_interp_v2", image(lambda x: F.interpolate(x, size=[500, 999], mode="bilinear", align_corners=True), [-1, 2, 37, 61])),
    "bilinear_large_align_mode_1": ("bilinear_interp_v2", image(lambda x: F.interpolate(x, size=[777, 301], mode="bilinear", align_mode=1), [-1, 2, 61, 37])),
    "bilinear_downsample": ("bilinear_interp_v2", image(lambda x: F.interpolate(x, size=[23, 41], mode="bilinear"), [-1, 3, 64, 97])),
    "linear_large": ("linear_interp_v2", program(lambda x: F.interpolate(x, size=[4093], mode="linear", data_format="NCW"), ([-1, 3, 517], "float32"))),
    # and powers of two: one ONNX Resize where NCHW with known sizes (it samples exactly where
    # Paddle does), the gathers for NHWC, 3-D and unknown sizes
    "bilinear_x8_large": ("bilinear_interp_v2", image(lambda x: F.interpolate(x, scale_factor=8, mode="bilinear"), [-1, 2, 37, 61])),
    "bilinear_x8_align_corners": ("bilinear_interp_v2", image(lambda x: F.interpolate(x, size=[257, 513], mode="bilinear", align_corners=True), [-1, 2, 33, 65])),
    "bilinear_x4_align_mode_1": ("bilinear_interp_v2", image(lambda x: F.interpolate(x, size=[244, 148], mode="bilinear", align_mode=1), [-1, 2, 61, 37])),
    "bilinear_quarter": ("bilinear_interp_v2", image(lambda x: F.interpolate(x, size=[16, 24], mode="bilinear"), [-1, 3, 64, 96])),
    "bilinear_x2_nhwc": ("bilinear_interp_v2", image(lambda x: F.interpolate(x, scale_factor=2, mode="bilinear", data_format="NHWC"), [-1, 16, 24, 3])),
    "bilinear_to_input_size": ("bilinear_interp_v2", image(lambda x: F.interpolate(F.avg_pool2d(x, 8), size=paddle.shape(x)[2:], mode="bilinear"), [-1, 3, 64, 48])),
    "bilinear_x4_dynamic_hw": ("bilinear_interp_v2", image(lambda x: F.interpolate(x, scale_factor=4, mode="bilinear"), [-1, 3, -1, -1])),
    "linear_x4": ("linear_interp_v2", program(lambda x: F.interpolate(x, size=[2068], mode="linear", data_format="NCW"), ([-1, 3, 517], "float32"))),
    "pixel_shuffle_float64": ("pixel_shuffle", program(lambda x: F.pixel_shuffle(x, 2, "NHWC"), ([-1, -1, 3, 8], "float64"))),
    "flip_bool": ("flip", program(lambda x: paddle.flip(x, [0, 1]), ([-1, 3], "bool"))),
}  # fmt: skip


# --- numeric parity: graphgate's lowering against Paddle's Executor ---------------------------

# Feeds random_feeds cannot make valid (sizes >= 1, scales > 0, reflect pads < the axis) or
# that reach a trap (pads wider than the axis, OutSize within what the scale can read).
_FEED_VALUES: dict[str, dict[str, np.ndarray]] = {
    "nearest_out_size_tensor": {"x1": np.array([5, 11], np.int32)},
    "nearest_size_tensor_list": {"x1": np.array([7], np.int32)},
    "nearest_scale_tensor": {"x1": np.array([1.7], np.float32)},
    "nearest_out_size_and_scale": {"x1": np.array([15, 9], np.int32)},
    "bilinear_scale_tensor": {"x1": np.array([1.3, 0.6], np.float32)},
    "bilinear_out_size_tensor": {"x1": np.array([3, 20], np.int32)},
    "bilinear_size_tensor_list": {"x1": np.array([14], np.int32)},
    "bilinear_out_size_and_scale": {"x1": np.array([16, 11], np.int32)},
    "bilinear_uint8_flat": {"x0": np.full((2, 3, 4, 4), 3, np.uint8)},  # blends can give 2.99..
    "pad5d_paddings_tensor": {"x1": np.array([1, 0, 2, 3, 0, 1], np.int32)},
    "pad5d_reflect_paddings_tensor": {"x1": np.array([7, 1, 0, 3, 2, 3], np.int32)},
    "pad5d_replicate_paddings_tensor": {"x1": np.array([9, 1, 0, 3, 2, 5], np.int64)},
    "pad5d_circular_paddings_tensor": {"x1": np.array([17, 1, 0, 8, 9, 2], np.int64)},
}


# NOTE: Paddle 3.3's kernel computes int(in * scale) in double, its compile-time rule in float32:
# for 10 * 1.3f the kernel gives 12, the rule 13. graphgate's rule follows the kernel; the
# "double_product" programs check that at the sizes where the two differ.
CASES: Final = {
    name: Case(
        op_type,
        build,
        sizes=sizes((1, 3), (5, 10), (0, 0)),
        int_high=256,
        values=(_FEED_VALUES.get(name, {}),),
        policy=POLICY,
        registry=REGISTRY,
        dims=name in PROGRAMS,
    )
    for name, (op_type, build) in PARITY_PROGRAMS.items()
}
