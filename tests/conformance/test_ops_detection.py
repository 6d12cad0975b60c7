"""yolo_box and multiclass_nms3 built by real Paddle 3.3.1 and run by both: graphgate's outputs
equal Paddle's Executor's (floats within tolerance; NMS rows, labels, Index and NmsRoisNum in
Paddle's exact order, including ties, empty results and several images)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest

# Imported first: paddle_util switches Paddle to legacy programs before importing it.
pytest.importorskip("tests.conformance.paddle_util")

from executor.errors import OutputMismatch
from executor.scope import check_outputs
from executor.session import prepare
from tests.conformance.paddle_util import assert_parity, build_and_save, paddle, run_paddle
from validator import Code, ValidationFailed, validate
from validator.ops.detection import random_boxes
from validator.runtime import reinfer

pytestmark = pytest.mark.paddle

ANCHORS = [10, 13, 16, 30, 33, 23]


def _yolo_program(classes: int, *, iou_aware: bool = False, **attrs: Any) -> Any:
    anchors = len(ANCHORS) // 2
    channels = anchors * (5 + classes) + (anchors if iou_aware else 0)

    def build() -> tuple[list[Any], list[Any]]:
        x = paddle.static.data("x", [-1, channels, -1, -1], "float32")
        size = paddle.static.data("size", [-1, 2], "int32")
        boxes, scores = paddle.vision.ops.yolo_box(
            x, size, anchors=ANCHORS, class_num=classes, iou_aware=iou_aware, **attrs
        )
        return [x, size], [boxes, scores]

    return build_and_save(build), channels


@pytest.mark.parametrize(
    "attrs",
    [
        {"conf_thresh": 0.3, "downsample_ratio": 8, "scale_x_y": 1.2},
        {"conf_thresh": 0.01, "downsample_ratio": 16, "clip_bbox": False},
        {"conf_thresh": 0.2, "downsample_ratio": 32, "iou_aware": True, "iou_aware_factor": 0.4},
    ],
    ids=["scale_x_y-clip", "no-clip", "iou_aware"],
)
@pytest.mark.parametrize("batch", [1, 2])
def test_yolo_box_matches_paddle(attrs: dict[str, Any], batch: int) -> None:
    saved, channels = _yolo_program(4, **attrs)
    rng = np.random.default_rng(batch)
    feeds = {
        "x": (rng.standard_normal((batch, channels, 5, 7)) * 2).astype(np.float32),
        "size": rng.integers(20, 300, (batch, 2)).astype(np.int32),
    }
    scores = assert_parity(saved, feeds, rtol=1e-5, atol=1e-3)[saved.fetches[1]]
    assert (scores == 0).any() and (scores > 0).any()  # the threshold zeroed some, not all


def _nms(bboxes: Any, scores: Any, **attrs: Any) -> list[Any]:
    helper = paddle.base.layer_helper.LayerHelper("multiclass_nms3")
    out = helper.create_variable_for_type_inference(bboxes.dtype)
    index = helper.create_variable_for_type_inference("int32")
    counts = helper.create_variable_for_type_inference("int32")
    helper.append_op(
        type="multiclass_nms3",
        inputs={"BBoxes": bboxes, "Scores": scores},
        outputs={"Out": out, "Index": index, "NmsRoisNum": counts},
        attrs=attrs,
    )
    return [out, index, counts]


def _nms_program(classes: int, boxes: int, dtype: str = "float32", **attrs: Any) -> Any:
    defaults = {
        "score_threshold": 0.3,
        "nms_top_k": 6,
        "keep_top_k": 5,
        "nms_threshold": 0.4,
        "normalized": True,
        "nms_eta": 1.0,
        "background_label": 0,
    }

    def build() -> tuple[list[Any], list[Any]]:
        bboxes = paddle.static.data("bboxes", [-1, boxes, 4], dtype)
        scores = paddle.static.data("scores", [-1, classes, boxes], dtype)
        return [bboxes, scores], _nms(bboxes, scores, **{**defaults, **attrs})

    return build_and_save(build)


def _nms_feeds(batch: int, classes: int, boxes: int, *, scale: float = 1.0, seed: int = 0) -> Any:
    rng = np.random.default_rng(seed)
    return {
        "bboxes": random_boxes(batch, boxes, scale=scale, seed=seed),
        "scores": rng.random((batch, classes, boxes)).astype(np.float32),
    }


NMS_VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "no-background": {"background_label": -1},
    "background-2": {"background_label": 2},
    "not-normalized": {"normalized": False},
    "keep_top_k-all": {"keep_top_k": -1},
    "nms_top_k-all": {"nms_top_k": -1, "keep_top_k": 40},
    "eta": {"nms_eta": 0.8, "nms_threshold": 0.9, "nms_top_k": 12, "keep_top_k": 30},
    "strict": {"nms_threshold": 0.05, "keep_top_k": 100},
}


@pytest.mark.parametrize("variant", list(NMS_VARIANTS))
@pytest.mark.parametrize("batch", [1, 2])
def test_multiclass_nms3_matches_paddle(variant: str, batch: int) -> None:
    attrs = NMS_VARIANTS[variant]
    scale = 30.0 if attrs.get("normalized") is False else 1.0
    saved = _nms_program(4, 16, **attrs)
    out, index, counts = assert_parity(
        saved, _nms_feeds(batch, 4, 16, scale=scale, seed=batch)
    ).values()
    assert out.shape[0] == index.shape[0] == counts.sum() > 0


def test_ties_order_as_paddle_does() -> None:
    """Equal scores within a class (lower box index first) and across classes (lower label
    first when keep_top_k cuts among them), and ties cut by nms_top_k."""
    saved = _nms_program(3, 10, background_label=-1, nms_top_k=4, keep_top_k=5, nms_threshold=0.9)
    feeds = _nms_feeds(2, 3, 10)
    feeds["scores"] = np.full((2, 3, 10), 0.5, np.float32)
    feeds["scores"][1, :, ::3] = 0.75
    counts = assert_parity(saved, feeds)[saved.fetches[2]]
    assert list(counts) == [5, 5]


def test_nothing_above_the_threshold_gives_empty_rows_like_paddle() -> None:
    saved = _nms_program(3, 8)
    feeds = _nms_feeds(2, 3, 8)
    feeds["scores"] *= 0.1
    out, index, counts = assert_parity(saved, feeds).values()
    assert out.shape == (0, 6) and index.shape == (0, 1) and list(counts) == [0, 0]


def test_images_keep_different_counts() -> None:
    saved = _nms_program(3, 12, keep_top_k=-1)
    feeds = _nms_feeds(2, 3, 12, seed=4)
    feeds["scores"][1] *= 0.35  # the second image has few boxes above 0.3
    _, _, counts = assert_parity(saved, feeds).values()
    assert counts[0] > counts[1] > 0


def test_double_precision_matches_paddle() -> None:
    saved = _nms_program(3, 10, "float64", nms_eta=0.7, nms_threshold=0.8, keep_top_k=8)
    feeds = {k: v.astype(np.float64) for k, v in _nms_feeds(2, 3, 10, seed=7).items()}
    assert_parity(saved, feeds)


def test_yolo_box_feeds_multiclass_nms3_as_in_yolov3() -> None:
    """The YOLOv3 post-processing chain: decode, transpose scores to [N, C, M], NMS."""

    def build() -> tuple[list[Any], list[Any]]:
        x = paddle.static.data("x", [-1, 3 * 9, 4, 4], "float32")
        size = paddle.static.data("size", [-1, 2], "int32")
        boxes, scores = paddle.vision.ops.yolo_box(
            x, size, anchors=ANCHORS, class_num=4, conf_thresh=0.05, downsample_ratio=8
        )
        scores = paddle.transpose(scores, [0, 2, 1])
        return [x, size], _nms(
            boxes,
            scores,
            score_threshold=0.05,
            nms_top_k=20,
            keep_top_k=10,
            nms_threshold=0.45,
            normalized=False,
            nms_eta=1.0,
            background_label=-1,
        )

    saved = build_and_save(build)
    rng = np.random.default_rng(3)
    feeds = {
        "x": (rng.standard_normal((2, 27, 4, 4)) * 2).astype(np.float32),
        "size": np.array([[64, 48], [32, 40]], np.int32),
    }
    assert_parity(saved, feeds, atol=1e-3)


def test_runs_check_the_row_bound() -> None:
    """Out is declared [-1, 6] with at most N x keep_top_k rows: a run stays within it."""
    saved = _nms_program(4, 16, keep_top_k=3, nms_threshold=0.9)
    validated = validate(saved.program, saved.params)
    out_type = validated.types[saved.fetches[0]]
    assert out_type.shape == (-1, 6)
    feeds = _nms_feeds(2, 4, 16)
    assert run_paddle(saved, feeds)[0].shape[0] == 6  # 2 images x keep_top_k, as declared
    assert_parity(saved, feeds)


def test_unbounded_candidates_are_refused() -> None:
    """nms_top_k -1 over a box count only known at run time: no bound for the greedy loop."""

    def build() -> tuple[list[Any], list[Any]]:
        bboxes = paddle.static.data("bboxes", [-1, -1, 4], "float32")
        scores = paddle.static.data("scores", [-1, 3, -1], "float32")
        return [bboxes, scores], _nms(
            bboxes, scores, score_threshold=0.1, nms_top_k=-1, keep_top_k=10, nms_threshold=0.5
        )

    saved = build_and_save(build)
    with pytest.raises(ValidationFailed) as info:
        validate(saved.program, saved.params)
    assert [d.code for d in info.value.diagnostics] == [Code.LOWERING_UNSUPPORTED]


@pytest.mark.parametrize("boxes", [5, 12])
def test_nms_top_k_bounds_the_candidates_of_an_unknown_box_count(boxes: int) -> None:
    """A detector exported with a dynamic image size: M is unknown, nms_top_k bounds the
    candidates per class (and keep_top_k the rows), as in PP-YOLOE+ (nms_top_k 1000 over
    [-1, -1, 4] boxes). Runs with fewer and with more boxes than nms_top_k match Paddle."""

    def build() -> tuple[list[Any], list[Any]]:
        bboxes = paddle.static.data("bboxes", [-1, -1, 4], "float32")
        scores = paddle.static.data("scores", [-1, 3, -1], "float32")
        return [bboxes, scores], _nms(
            bboxes, scores, score_threshold=0.1, nms_top_k=8, keep_top_k=6, nms_threshold=0.5
        )

    saved = build_and_save(build)
    out_type = validate(saved.program, saved.params).types[saved.fetches[0]]
    assert out_type.shape == (-1, 6)
    out, _, counts = assert_parity(saved, _nms_feeds(2, 3, boxes, seed=boxes)).values()
    assert out.shape[0] == counts.sum() > 0


def test_nms_top_k_1000_of_an_unknown_box_count_validates() -> None:
    """The corpus detector's attributes (80 classes, nms_top_k 1000, keep_top_k 300)."""

    def build() -> tuple[list[Any], list[Any]]:
        bboxes = paddle.static.data("bboxes", [-1, -1, 4], "float32")
        scores = paddle.static.data("scores", [-1, 80, -1], "float32")
        return [bboxes, scores], _nms(
            bboxes, scores, score_threshold=0.01, nms_top_k=1000, keep_top_k=300,
            nms_threshold=0.7,
        )  # fmt: skip

    saved = build_and_save(build)
    validated = validate(saved.program, saved.params)
    out_bound = reinfer(validated, {"bboxes": (2, 3000, 4), "scores": (2, 80, 3000)})
    assert out_bound[saved.fetches[0]].bound == (600, 6)  # 2 images x keep_top_k


def test_budgets_count_the_bound_not_the_dynamic_dim() -> None:
    """Out's rows are bounded by batch x keep_top_k, so no per-request size check is needed
    and no data-dependent warning is given; a run past the bound would be refused."""
    saved = _nms_program(4, 16, keep_top_k=3)
    validated = validate(saved.program, saved.params)
    assert validated.report.data_dependent == ()
    assert Code.DATA_DEPENDENT_SHAPE not in {d.code for d in validated.report.warnings}
    out_name, index_name, _ = saved.fetches
    expected = reinfer(validated, {"bboxes": (2, 16, 4), "scores": (2, 4, 16)})
    assert expected[out_name].bound == (6, 6)
    check_outputs({out_name: np.zeros((6, 6), np.float32)}, expected)
    with pytest.raises(OutputMismatch, match=r"expected float32\[-1, 6\] \(at most \[6, 6\]\)"):
        check_outputs({out_name: np.zeros((7, 6), np.float32)}, expected)
    with pytest.raises(OutputMismatch):
        check_outputs({index_name: np.zeros((7, 1), np.int32)}, expected)


def _onnx_op_types(graph: onnx.GraphProto) -> set[str]:
    """The op types of a graph and of every subgraph in it (If branches, Loop bodies)."""
    found = set()
    for node in graph.node:
        found.add(node.op_type)
        for attr in node.attribute:
            for sub in [attr.g] if attr.HasField("g") else attr.graphs:
                found |= _onnx_op_types(sub)
    return found


@pytest.mark.parametrize(
    ("dtype", "attrs", "fast"),
    [
        ("float32", {}, True),
        ("float32", {"nms_eta": 0.8, "nms_threshold": 0.5}, True),  # eta shrinks only above 0.5
        ("float32", {"normalized": False}, False),
        ("float32", {"nms_eta": 0.8, "nms_threshold": 0.9}, False),
        ("float64", {}, False),
    ],
    ids=["normalized", "eta-idle", "not-normalized", "eta", "float64"],
)
def test_onnx_non_max_suppression_is_used_where_it_decides_as_paddle(
    dtype: str, attrs: dict[str, Any], fast: bool
) -> None:
    """The compiled model holds NonMaxSuppression (beside the Loop, for improper boxes) only
    where onnxruntime's rule is Paddle's: float32, normalized, a threshold eta never shrinks."""
    saved = _nms_program(4, 16, dtype, **attrs)
    model = onnx.load_from_string(prepare(validate(saved.program, saved.params)).model_bytes)
    ops = _onnx_op_types(model.graph)
    assert ("NonMaxSuppression" in ops) == fast
    assert "Loop" in ops


def _lattice_boxes(rng: np.random.Generator, batch: int, boxes: int) -> np.ndarray:
    """Boxes on a 1/8 grid (exact float32 areas): shared edges, IoUs exactly 1/2 (boxes 0, 1)
    and 1/4 (2, 3), box 5 a copy of box 4, and more such by chance."""
    corner = rng.integers(0, 6, (batch, boxes, 2))
    size = rng.integers(1, 4, (batch, boxes, 2))
    out = np.concatenate([corner, corner + size], -1).astype(np.float32) / 8
    out[:, 0:2] = [[0, 0, 3 / 8, 1 / 8], [1 / 8, 0, 4 / 8, 1 / 8]]  # IoU 2 / 4
    out[:, 2:4] = [[0, 2 / 8, 5 / 8, 3 / 8], [3 / 8, 2 / 8, 1, 3 / 8]]  # IoU 2 / 8
    out[:, 5] = out[:, 4]
    return out


def _tied_lattice_feeds(seed: int, batch: int = 2, classes: int = 3, boxes: int = 16) -> Any:
    """Scores in quarters (ties everywhere; 0 and 0.25 under the tests' threshold 0.3), the
    best of class 1 for the boxes whose IoU is 1/2 or 1/4."""
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 5, (batch, classes, boxes)).astype(np.float32) / 4
    scores[:, 1, :4] = 1.0
    return {"bboxes": _lattice_boxes(rng, batch, boxes), "scores": scores}


@pytest.mark.parametrize("seed", range(10))
def test_onnx_non_max_suppression_matches_paddle_on_tied_lattice_boxes(seed: int) -> None:
    """Exact score ties (nms_top_k cutting among them), identical boxes, IoUs exactly at the
    threshold, thresholds 0 and 1, background labels: the NonMaxSuppression path keeps what
    Paddle keeps, in its order."""
    attrs: dict[str, Any] = {
        "nms_threshold": [0.5, 0.25, 0.6, 0.0, 1.0][seed % 5],
        "nms_top_k": [-1, 3, 5][seed % 3],
        "keep_top_k": [-1, 7][seed // 5],
        "background_label": [0, -1, 2][seed // 2 % 3],
    }
    saved = _nms_program(3, 16, **attrs)
    assert_parity(saved, _tied_lattice_feeds(seed, batch=1 + seed % 2))


def _improper(feeds: dict[str, np.ndarray], kind: str) -> dict[str, np.ndarray]:
    """Box 7 of the last image made inverted (x2 < x1) or empty (x2 == x1, and box 8 a copy of
    it), candidates of class 1 after box 10; or box 9 of the first image inverted but no
    candidate."""
    boxes, scores = feeds["bboxes"], feeds["scores"]
    if kind == "not-a-candidate":
        boxes[0, 9, [0, 2]] = boxes[0, 9, [2, 0]]
        scores[0, :, 9] = 0.0
        return feeds
    if kind == "inverted":
        # Against box 10, Paddle's overlap is -2 / 6 (area 0), onnxruntime's IoU 2 / 4.
        boxes[-1, 7], boxes[-1, 10] = [2 / 8, 0, 1 / 8, 2 / 8], [0, 0, 2 / 8, 2 / 8]
    else:
        boxes[-1, 7, 2] = boxes[-1, 7, 0]
        boxes[-1, 8] = boxes[-1, 7]  # two empty boxes: Paddle's IoU is 0 / 0, a suppression
    scores[-1, 1] = np.minimum(scores[-1, 1], 0.5)
    scores[-1, 1, 7:9], scores[-1, 1, 10] = 0.75, 1.0
    return feeds


@pytest.mark.parametrize("kind", ["inverted", "empty", "not-a-candidate"])
@pytest.mark.parametrize("seed", range(3))
def test_improper_boxes_fall_back_to_the_loop_like_paddle(kind: str, seed: int) -> None:
    """A candidate box of no positive area (in one image of the batch) sends the run to the
    Loop, which follows Paddle's area 0 and 0/0; one that is no candidate does not matter."""
    saved = _nms_program(3, 16, nms_threshold=0.25, nms_top_k=8, keep_top_k=-1)
    assert_parity(saved, _improper(_tied_lattice_feeds(seed), kind))


@pytest.mark.parametrize("empty", ["one-image", "every-image"])
def test_onnx_non_max_suppression_with_no_candidates_matches_paddle(empty: str) -> None:
    saved = _nms_program(3, 16, nms_threshold=0.5)
    feeds = _tied_lattice_feeds(1)
    feeds["scores"][0 if empty == "one-image" else slice(None)] = 0.25  # under 0.3
    _, _, counts = assert_parity(saved, feeds).values()
    assert counts[0] == 0 and (counts[1] > 0) == (empty == "one-image")
