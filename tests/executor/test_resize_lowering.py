"""Which interpolations lower to one ONNX Resize: a float32 (bi)linear resize whose sizes are known
and related by a power of two samples exactly where Paddle's kernel does, and runs in one pass
over the output instead of ~15 (segmentation heads: benchmarks/results/latency.md); any other
ratio keeps the gathers that replay Paddle's float32 steps. Outputs against Paddle's."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import onnx
import pytest

# Imported first: paddle_util switches Paddle to legacy programs before importing it.
pytest.importorskip("tests.conformance.paddle_util")

from executor.convert import lower
from tests.conformance.families.resize import F, image
from tests.conformance.paddle_util import assert_parity, build_and_save, paddle
from validator import validate

pytestmark = pytest.mark.paddle


def _seg_head(x: Any) -> Any:
    """Features at 1/8 of the input, upsampled to the input's size read from its shape."""
    return F.interpolate(F.avg_pool2d(x, 8), size=paddle.shape(x)[2:], mode="bilinear")


def _nodes(build: Any) -> tuple[Any, Counter[str]]:
    saved = build_and_save(build)
    model = lower(validate(saved.program, saved.params)).model
    return saved, Counter(node.op_type for node in model.graph.node)


@pytest.mark.parametrize(
    ("fn", "shape"),
    [
        (_seg_head, [-1, 3, 64, 48]),
        (lambda x: F.interpolate(x, scale_factor=8, mode="bilinear"), [-1, 2, 37, 61]),
        (lambda x: F.interpolate(x, size=[257, 513], mode="bilinear", align_corners=True), [-1, 2, 33, 65]),
        (lambda x: F.interpolate(x, size=[244, 148], mode="bilinear", align_mode=1), [-1, 2, 61, 37]),
        (lambda x: F.interpolate(x, size=[16, 24], mode="bilinear"), [-1, 3, 64, 96]),
    ],
    ids=["to_input_size", "x8", "x8_align_corners", "x4_align_mode_1", "quarter"],
)  # fmt: skip
def test_power_of_two_resize_is_one_onnx_resize_and_matches_paddle(
    fn: Any, shape: list[int]
) -> None:
    saved, nodes = _nodes(image(fn, shape))
    assert nodes["Resize"] == 1
    assert not nodes.keys() & {"Gather", "If", "Where"}
    x = np.random.default_rng(0).standard_normal([2, *shape[1:]]).astype(np.float32)
    assert_parity(saved, {"x0": x})


@pytest.mark.parametrize(
    ("fn", "shape"),
    [
        (lambda x: F.interpolate(x, size=[509, 1021], mode="bilinear"), [-1, 2, 37, 61]),
        (lambda x: F.interpolate(x, scale_factor=3, mode="bilinear"), [-1, 2, 8, 8]),
        (lambda x: F.interpolate(x, scale_factor=0.5, mode="bilinear"), [-1, 2, 9, 8]),
        (lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), [-1, 2, -1, -1]),
        (lambda x: F.interpolate(x.astype("float64"), scale_factor=2, mode="bilinear"), [-1, 2, 8, 8]),
        # onnxruntime's CUDA Resize has no linear NHWC (nor 3-D): those keep the gathers
        (lambda x: F.interpolate(x, scale_factor=2, mode="bilinear", data_format="NHWC"), [-1, 16, 24, 3]),
        (lambda x: F.interpolate(x, size=[2068], mode="linear", data_format="NCW"), [-1, 3, 517]),
    ],
    ids=["not_a_power_of_two", "scale_3", "half_of_odd_size", "unknown_sizes", "float64", "x2_nhwc", "linear_x4"],
)  # fmt: skip
def test_other_resizes_keep_paddles_steps(fn: Any, shape: list[int]) -> None:
    _saved, nodes = _nodes(image(fn, shape))
    assert nodes["Resize"] == 0
    assert nodes["Gather"] >= 2


def test_shape_slice_of_a_batched_tensor_gives_known_sizes() -> None:
    # The validator knows the dims [2:] of `shape(x)` although the batch dim is -1, so the
    # upsampled output's dims are known too (Paddle records -1 for them).
    saved = build_and_save(image(_seg_head, [-1, 3, 64, 48]))
    validated = validate(saved.program, saved.params)
    (out,) = saved.fetches
    assert validated.types[out].shape == (-1, 3, 64, 48)
    model = lower(validated).model
    dims = [d.dim_value or d.dim_param for d in model.graph.output[0].type.tensor_type.shape.dim]
    assert dims[1:] == [3, 64, 48]
    onnx.checker.check_model(model)  # raises on an invalid model
