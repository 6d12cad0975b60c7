"""The batch proof on the models branch's ops in whole programs: a YOLO head decodes per image
(batchable), its NMS lists the kept boxes of all images together (not), and a dim that the data
decides (TensorType.bound) is never taken for the batch dim."""

from __future__ import annotations

import dataclasses
from typing import Final

import pytest

from graph_proto.types import DType
from tests.support.builders import FP32, GraphBuilder, V, weights
from validator import validate
from validator.batch import output_axes
from validator.ops import BatchView, Couples, TensorType
from validator.ops.detection import MULTICLASS_NMS3

_YOLO: Final = {"anchors": [10, 13, 16, 30], "class_num": 3, "downsample_ratio": 8}
_NMS: Final = {"score_threshold": 0.2, "nms_top_k": 6, "keep_top_k": 5, "background_label": -1}


def _report(g: GraphBuilder) -> tuple[bool, str | None]:
    built = g.built()
    report = validate(built.program, built.params).report
    return report.batchable, report.batch_coupling


def _yolo_head() -> GraphBuilder:
    """x [N, 2 anchors x (5 + 3 classes), 2, 2] and each image's size -> boxes, scores."""
    g = GraphBuilder()
    x = g.feed("x", FP32, [-1, 16, 2, 2])
    size = g.feed("im_size", DType.INT32, [-1, 2])
    g.node(
        "yolo_box",
        {"X": [x], "ImgSize": [size]},
        {"Boxes": [V("boxes", [-1, 8, 4])], "Scores": [V("scores", [-1, 8, 3])]},
        _YOLO,
    )
    return g


def test_a_yolo_head_decodes_each_image_apart() -> None:
    g = _yolo_head()
    g.fetch("boxes")
    g.fetch("scores")
    assert _report(g) == (True, None)


def test_nms_over_the_decoded_boxes_couples_the_images() -> None:
    g = _yolo_head()
    g.node(
        "transpose2", {"X": ["scores"]}, {"Out": [V("by_class", [-1, 3, 8])]}, {"axis": [0, 2, 1]}
    )
    g.node(
        "multiclass_nms3",
        {"BBoxes": ["boxes"], "Scores": ["by_class"]},
        {
            "Out": [V("kept", [-1, 6])],
            "Index": [V("index", [-1, 1], DType.INT32)],
            "NmsRoisNum": [V("counts", [-1], DType.INT32)],
        },
        _NMS,
    )
    g.fetch("kept")
    batchable, coupling = _report(g)
    assert not batchable
    assert coupling is not None
    assert coupling.startswith("block 0, op 4 (multiclass_nms3): lists the kept boxes")


def test_a_rule_cannot_put_the_batch_on_a_dim_the_data_decides() -> None:
    """Even a rule that claimed NMS rows were the batch is refused: Out's dim 0 is bounded."""
    claims_rows = dataclasses.replace(MULTICLASS_NMS3, batch=lambda _view: 0)
    scores = TensorType(DType.FP32, (-1, 3, 8))
    view = BatchView(
        axes={"BBoxes": (0,), "Scores": (0,), "RoisNum": ()},
        types_in={"BBoxes": (TensorType(DType.FP32, (-1, 8, 4)),), "Scores": (scores,)},
        types_out={
            "Out": (TensorType(DType.FP32, (-1, 6), bound=(10, 6)),),
            "Index": (TensorType(DType.INT32, (-1, 1), bound=(10, 1)),),
        },
        attrs=None,
    )
    with pytest.raises(
        Couples, match="expected output 'Out' to carry the batch dimension at axis 0"
    ):
        output_axes(claims_rows, view)


def _set_value(
    axes: list[int], starts: list[int], ends: list[int], *, x: list[int], value: list[int]
) -> GraphBuilder:
    """set_value of x's slice; a value with a -1 dim is fed, any other is a parameter."""
    g = GraphBuilder()
    g.feed("x", FP32, x)
    if -1 in value:
        g.feed("v", FP32, value)
    else:
        g.param("v", weights(*value))
    attrs = {"axes": axes, "starts": starts, "ends": ends, "steps": [1] * len(axes)}
    g.node("set_value", {"Input": ["x"], "ValueTensor": ["v"]}, {"Out": [V("y", x)]}, attrs)
    g.fetch("y")
    return g


def test_set_value_on_other_axes_keeps_rows_apart() -> None:
    fed = _set_value([1], [1], [3], x=[-1, 4, 5], value=[-1, 2, 5])
    shared = _set_value([1], [1], [3], x=[-1, 4, 5], value=[2, 5])
    assert (_report(fed), _report(shared)) == ((True, None), (True, None))


@pytest.mark.parametrize(
    ("axes", "starts", "ends", "x", "value", "why"),
    [
        (
            [0],
            [1],
            [2**31 - 1],
            [-1, 4, 5],
            [1, 4, 5],
            "writes into a slice of the batch dimension",
        ),
        # v [N] lines up with x's last dim (also dynamic), not with its rows
        (
            [1],
            [1],
            [3],
            [-1, 4, -1],
            [-1],
            "expected the batch dimension of 'ValueTensor' on axis 0 of the slice, got axis 2",
        ),
    ],
    ids=["slices-the-batch", "value-rows-misaligned"],
)
def test_set_value_that_mixes_rows_couples(
    axes: list[int], starts: list[int], ends: list[int], x: list[int], value: list[int], why: str
) -> None:
    assert _report(_set_value(axes, starts, ends, x=x, value=value)) == (
        False,
        f"block 0, op {1 if -1 not in value else 2} (set_value): {why}",
    )
