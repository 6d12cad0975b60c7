"""Detection post-processing: yolo_box (decodes a YOLO head) and multiclass_nms3 (per-class NMS).

multiclass_nms3 keeps a number of boxes only the data decides: its Out and Index get a first
dim of -1 with an upper bound (TensorType.bound) that budgets count and runs check against.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from graph_proto.types import UNKNOWN, DType, Shape
from validator.diagnostics import Code
from validator.ops._def import (
    AttrError,
    BatchView,
    Case,
    Couples,
    In,
    OpDef,
    Out,
    ShapeError,
    TensorType,
    UnsupportedError,
)
from validator.ops._shape import require_rank

_REAL: Final = frozenset({DType.FP32, DType.FP64})  # Paddle's CPU kernels: float and double
# Greedy NMS runs as an ONNX Loop over one class's sorted candidates; the gate bounds every
# Loop's trip count (executor/gate.py MAX_LOOP_TRIPS), which bounds them.
MAX_CANDIDATES: Final = 1024
_SEED: Final = np.random.default_rng(20260511)


def _same(a: int, b: int) -> bool:
    return a < 0 or b < 0 or a == b


def _known_product(*dims: int) -> int:
    return int(np.prod(dims)) if all(d >= 0 for d in dims) else UNKNOWN


# --- yolo_box ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class YoloBoxAttrs:
    anchors: tuple[int, ...]  # [w0, h0, w1, h1, ...] in input pixels
    class_num: int
    conf_thresh: float = 0.01
    downsample_ratio: int = 32
    clip_bbox: bool = True
    scale_x_y: float = 1.0
    iou_aware: bool = False
    iou_aware_factor: float = 0.5


def yolo_channels(a: YoloBoxAttrs) -> int:
    """X's channels: per anchor x, y, w, h, objectness and the class logits, plus one IoU
    logit per anchor in front of them all when iou_aware."""
    anchors = len(a.anchors) // 2
    return anchors * (5 + a.class_num) + (anchors if a.iou_aware else 0)


def _yolo_box_infer(x: TensorType, img_size: TensorType, a: YoloBoxAttrs) -> list[Shape]:
    require_rank(x, [4], "X")
    require_rank(img_size, [2], "ImgSize")
    if not a.anchors or len(a.anchors) % 2:
        raise AttrError(f"anchors must be a non-empty list of (w, h) pairs, got {list(a.anchors)}")
    if a.class_num <= 0:
        raise AttrError(f"class_num must be > 0, got {a.class_num}")
    if a.downsample_ratio <= 0:
        raise AttrError(f"downsample_ratio must be > 0, got {a.downsample_ratio}")
    if a.iou_aware and not 0 <= a.iou_aware_factor <= 1:
        raise AttrError(f"iou_aware_factor must be in [0, 1], got {a.iou_aware_factor}")
    n, channels, h, w = x.shape
    if not _same(channels, yolo_channels(a)):
        raise ShapeError(
            f"X: expected {yolo_channels(a)} channels for {len(a.anchors) // 2} anchors and "
            f"{a.class_num} classes{' (iou_aware)' if a.iou_aware else ''}, got {channels}"
        )
    if not _same(img_size.shape[1], 2) or not _same(img_size.shape[0], n):
        raise ShapeError(f"ImgSize: expected dims [{n}, 2], got {list(img_size.shape)}")
    n = n if n >= 0 else img_size.shape[0]
    boxes = _known_product(len(a.anchors) // 2, h, w)
    return [(n, boxes, 4), (n, boxes, a.class_num)]


def _yolo_box_cost(
    _x: TensorType, _img_size: TensorType, outputs: list[TensorType], _a: YoloBoxAttrs
) -> int:
    boxes, scores = outputs
    return 10 * boxes.numel() + 2 * scores.numel()


def _sigmoid(v: np.ndarray) -> np.ndarray:
    # Paddle: 1.0 / (1.0 + exp(-x)) with exp in T and the rest in double.
    return np.asarray(1.0 / (1.0 + np.exp(-v).astype(np.float64))).astype(v.dtype)


def yolo_box_reference(
    x: np.ndarray, img_size: np.ndarray, a: YoloBoxAttrs
) -> tuple[np.ndarray, np.ndarray]:
    """Paddle's CPU kernel, in its order of operations."""
    t = x.dtype.type
    n, _, h, w = x.shape
    anchors = len(a.anchors) // 2
    conf_iou = None
    if a.iou_aware:
        conf_iou, x = _sigmoid(x[:, :anchors]), x[:, anchors:]
    p = x.reshape(n, anchors, 5 + a.class_num, h, w)
    conf = _sigmoid(p[:, :, 4])
    if conf_iou is not None:
        factor = np.float32(a.iou_aware_factor)
        conf = conf ** t(1.0 - float(factor)) * conf_iou ** t(factor)
    scale = np.float32(a.scale_x_y)
    bias = np.float32(-0.5) * (scale - np.float32(1))
    img_h = img_size[:, 0].astype(t).reshape(n, 1, 1, 1)
    img_w = img_size[:, 1].astype(t).reshape(n, 1, 1, 1)
    gx, gy = np.arange(w).astype(t), np.arange(h).astype(t).reshape(h, 1)
    cx = (gx + _sigmoid(p[:, :, 0]) * t(scale) + t(bias)) * img_w / t(w)
    cy = (gy + _sigmoid(p[:, :, 1]) * t(scale) + t(bias)) * img_h / t(h)
    sizes = np.asarray(a.anchors).reshape(1, anchors, 2, 1, 1).astype(t)
    bw = np.exp(p[:, :, 2]) * sizes[:, :, 0] * img_w / t(a.downsample_ratio * w)
    bh = np.exp(p[:, :, 3]) * sizes[:, :, 1] * img_h / t(a.downsample_ratio * h)
    x1, y1, x2, y2 = cx - bw / t(2), cy - bh / t(2), cx + bw / t(2), cy + bh / t(2)
    if a.clip_bbox:
        right = (img_size[:, 1] - 1).astype(t).reshape(n, 1, 1, 1)
        bottom = (img_size[:, 0] - 1).astype(t).reshape(n, 1, 1, 1)
        x1, y1 = np.where(x1 > 0, x1, t(0)), np.where(y1 > 0, y1, t(0))
        x2, y2 = np.where(x2 < right, x2, right), np.where(y2 < bottom, y2, bottom)
    kept = ~(conf < t(np.float32(a.conf_thresh)))
    boxes = np.where(kept[..., None], np.stack([x1, y1, x2, y2], -1), t(0))
    scores = np.where(kept[:, :, None], conf[:, :, None] * _sigmoid(p[:, :, 5:]), t(0))
    scores = scores.transpose(0, 1, 3, 4, 2)
    return boxes.reshape(n, -1, 4), scores.reshape(n, -1, a.class_num)


def _yolo(anchors: int, classes: int, h: int, w: int, *, n: int = 2, iou: bool = False) -> Any:
    channels = anchors * (5 + classes) + (anchors if iou else 0)
    return (_SEED.standard_normal((n, channels, h, w)) * 2).astype(np.float32)


def _img(*sizes: tuple[int, int]) -> np.ndarray:
    return np.array(sizes, np.int32)


_YOLO_ATTRS: Final = {"anchors": [10, 13, 16, 30], "class_num": 3, "downsample_ratio": 8}


def _yolo_box_batch(view: BatchView) -> int:
    """Each image decodes with its own ImgSize row: X and ImgSize carry the batch together."""
    axes = {slot: view.axis(slot) for slot in ("X", "ImgSize")}
    if any(axis != 0 for axis in axes.values()):
        got = ", ".join(f"{slot} at {axis}" for slot, axis in axes.items())
        raise Couples(f"expected the batch dimension at axis 0 of both X and ImgSize, got {got}")
    return 0


YOLO_BOX = OpDef(
    op_type="yolo_box",
    doc="Decodes a YOLOv3 head X into boxes in image pixels and per-class scores.",
    inputs=(In("X"), In("ImgSize", DType.INT32)),
    outputs=(Out("Boxes"), Out("Scores")),
    types={"T": _REAL},
    attrs=YoloBoxAttrs,
    infer=_yolo_box_infer,
    batch=_yolo_box_batch,
    cost=_yolo_box_cost,
    cases=(
        Case(
            {"X": _yolo(2, 3, 3, 4), "ImgSize": _img((64, 80), (30, 50))},
            {**_YOLO_ATTRS, "conf_thresh": 0.3, "scale_x_y": 1.2},
            expect=yolo_box_reference,
            rtol=1e-5,
            atol=1e-4,
        ),
        Case(
            {"X": _yolo(3, 2, 2, 3, n=1), "ImgSize": _img((40, 70))},
            {"anchors": [4, 5, 8, 9, 12, 7], "class_num": 2, "clip_bbox": False},
            expect=yolo_box_reference,
            atol=1e-4,
        ),
        Case(
            {"X": _yolo(2, 3, 2, 2, iou=True), "ImgSize": _img((32, 32), (16, 24))},
            {**_YOLO_ATTRS, "iou_aware": True, "iou_aware_factor": 0.4, "conf_thresh": 0.1},
            expect=yolo_box_reference,
            atol=1e-4,
        ),
        Case(
            {"X": _yolo(2, 3, 2, 3).astype(np.float64), "ImgSize": _img((50, 60), (20, 20))},
            _YOLO_ATTRS,
            expect=yolo_box_reference,
            atol=1e-9,
        ),
        *(
            Case(inputs, attrs, raises=raises, code=code)
            for inputs, attrs, raises, code in (
                (
                    {"X": _yolo(2, 4, 2, 2), "ImgSize": _img((8, 8), (8, 8))},
                    _YOLO_ATTRS,
                    "X: expected 16 channels for 2 anchors and 3 classes, got 18",
                    Code.SHAPE_MISMATCH,
                ),
                (
                    {"X": _yolo(2, 3, 2, 2), "ImgSize": _img((8, 8), (8, 8))},
                    {**_YOLO_ATTRS, "anchors": [10, 13, 16]},
                    "anchors must be a non-empty list of (w, h) pairs, got [10, 13, 16]",
                    Code.ATTR_VALUE,
                ),
                (
                    {"X": _yolo(2, 3, 2, 2), "ImgSize": _img((8, 8), (8, 8))},
                    {**_YOLO_ATTRS, "class_num": 0},
                    "class_num must be > 0, got 0",
                    Code.ATTR_VALUE,
                ),
                (
                    {"X": _yolo(2, 3, 2, 2), "ImgSize": _img((8, 8), (8, 8))},
                    {**_YOLO_ATTRS, "downsample_ratio": 0},
                    "downsample_ratio must be > 0, got 0",
                    Code.ATTR_VALUE,
                ),
                (
                    {"X": _yolo(2, 3, 2, 2, iou=True), "ImgSize": _img((8, 8), (8, 8))},
                    {**_YOLO_ATTRS, "iou_aware": True, "iou_aware_factor": 1.5},
                    "iou_aware_factor must be in [0, 1], got 1.5",
                    Code.ATTR_VALUE,
                ),
                (
                    {"X": _yolo(2, 3, 2, 2), "ImgSize": _img((8, 8))},
                    _YOLO_ATTRS,
                    "ImgSize: expected dims [2, 2], got [1, 2]",
                    Code.SHAPE_MISMATCH,
                ),
                (
                    {"X": _yolo(2, 3, 2, 2)[0], "ImgSize": _img((8, 8))},
                    _YOLO_ATTRS,
                    "X: expected rank [4], got 3",
                    Code.AXIS_INVALID,
                ),
                (
                    {"X": _yolo(2, 3, 2, 2), "ImgSize": np.ones((2, 2), np.int64)},
                    _YOLO_ATTRS,
                    "input 'ImgSize': expected int32, got int64",
                    Code.DTYPE_MISMATCH,
                ),
            )
        ),
    ),
)

# --- multiclass_nms3 --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MulticlassNmsAttrs:
    score_threshold: float
    nms_top_k: int  # per class, before NMS; negative: all
    keep_top_k: int  # per image, after NMS; negative: all
    nms_threshold: float = 0.3
    normalized: bool = True  # False: widths and heights count both edges (+1)
    nms_eta: float = 1.0  # < 1: the IoU threshold shrinks by it after each kept box (to 0.5)
    background_label: int = 0  # a class never kept; negative: none


def candidates_per_class(boxes: int, a: MulticlassNmsAttrs) -> int:
    """How many boxes of one class NMS looks at, at most: the top nms_top_k of the M boxes;
    nms_top_k alone where M is only known at run time (a detector with a dynamic image size),
    M alone where nms_top_k is negative (all), -1 where neither bounds it."""
    if a.nms_top_k < 0:
        return boxes
    if boxes < 0:
        return a.nms_top_k
    return min(boxes, a.nms_top_k)


def kept_per_image(classes: int, boxes: int, a: MulticlassNmsAttrs) -> int:
    """The most rows one image can contribute to Out (-1 when unknown)."""
    most = _known_product(classes, candidates_per_class(boxes, a))
    if a.keep_top_k < 0:
        return most
    return a.keep_top_k if most < 0 else min(most, a.keep_top_k)


def _nms_infer(
    bboxes: TensorType, scores: TensorType, rois_num: TensorType | None, a: MulticlassNmsAttrs
) -> list[TensorType]:
    if rois_num is not None or scores.rank == 2:
        raise UnsupportedError(
            "expected Scores [N, C, M] and BBoxes [N, M, 4] without RoisNum, got "
            f"Scores of rank {scores.rank}{' and RoisNum' if rois_num is not None else ''} "
            "(the per-RoI form is not supported)"
        )
    require_rank(bboxes, [3], "BBoxes")
    require_rank(scores, [3], "Scores")
    if bboxes.shape[2] in (8, 16, 24, 32):
        raise UnsupportedError(
            f"BBoxes: expected 4 coordinates per box, got {bboxes.shape[2]} (polygon NMS is not supported)"
        )
    n, classes, boxes = scores.shape
    if not _same(bboxes.shape[2], 4):
        raise ShapeError(f"BBoxes: expected dims [N, M, 4], got {list(bboxes.shape)}")
    if not (_same(bboxes.shape[0], n) and _same(bboxes.shape[1], boxes)):
        raise ShapeError(
            f"BBoxes: expected dims [{n}, {boxes}, 4] to match Scores {list(scores.shape)}, "
            f"got {list(bboxes.shape)}"
        )
    n = n if n >= 0 else bboxes.shape[0]
    boxes = boxes if boxes >= 0 else bboxes.shape[1]
    most = candidates_per_class(boxes, a)
    if not 0 <= most <= MAX_CANDIDATES:
        raise UnsupportedError(
            f"expected at most {MAX_CANDIDATES} NMS candidates per class (nms_top_k, or M "
            f"boxes), got {'an unbounded number' if most < 0 else most}"
        )
    rows = _known_product(n, kept_per_image(classes, boxes, a))
    return [
        TensorType(scores.dtype, (UNKNOWN, 6), bound=(rows, 6)),
        TensorType(DType.INT32, (UNKNOWN, 1), bound=(rows, 1)),
        TensorType(DType.INT32, (n,)),
    ]


def _nms_cost(
    _bboxes: TensorType,
    scores: TensorType,
    _rois_num: TensorType | None,
    _outputs: list[TensorType],
    a: MulticlassNmsAttrs,
) -> int:
    """Greedy NMS compares each candidate with every other one of its class (~20 FLOPs each)."""
    n, classes, boxes = scores.shape
    k = candidates_per_class(boxes, a)
    return n * classes * (boxes * 4 + k * k * 20)


def _jaccard(box: np.ndarray, kept: np.ndarray, normalized: bool) -> Any:
    t = box.dtype.type
    if kept[0] > box[2] or kept[2] < box[0] or kept[1] > box[3] or kept[3] < box[1]:
        return t(0)
    norm = t(0) if normalized else t(1)
    inter_w = min(box[2], kept[2]) - max(box[0], kept[0]) + norm
    inter_h = min(box[3], kept[3]) - max(box[1], kept[1]) + norm
    inter = inter_w * inter_h
    return inter / (_area(box, normalized) + _area(kept, normalized) - inter)


def _area(box: np.ndarray, normalized: bool) -> Any:
    t = box.dtype.type
    if box[2] < box[0] or box[3] < box[1]:
        return t(0)
    w, h = box[2] - box[0], box[3] - box[1]
    return w * h if normalized else (w + t(1)) * (h + t(1))


def _nms_one_class(boxes: np.ndarray, scores: np.ndarray, a: MulticlassNmsAttrs) -> list[int]:
    t = scores.dtype.type
    # Paddle sorts (score, index) pairs stably by the score as a float.
    order = [j for j in range(scores.size) if scores[j] > t(np.float32(a.score_threshold))]
    order.sort(key=lambda j: -np.float32(scores[j]))
    if a.nms_top_k > -1:
        order = order[: a.nms_top_k]
    kept: list[int] = []
    threshold = t(np.float32(a.nms_threshold))
    eta = t(np.float32(a.nms_eta))
    for j in order:
        if all(_jaccard(boxes[j], boxes[k], a.normalized) <= threshold for k in kept):
            kept.append(j)
            if eta < 1 and threshold > 0.5:
                threshold = t(threshold * eta)
    return kept


def nms_reference(
    bboxes: np.ndarray, scores: np.ndarray, _rois_num: None, a: MulticlassNmsAttrs
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Paddle's CPU kernel, written out loop by loop."""
    n, classes, boxes = scores.shape
    rows: list[list[Any]] = []
    index: list[int] = []
    counts: list[int] = []
    with np.errstate(invalid="ignore", divide="ignore"):
        for i in range(n):
            kept = {
                label: _nms_one_class(bboxes[i], scores[i, label], a)
                for label in range(classes)
                if label != a.background_label
            }
            if a.keep_top_k > -1 and sum(map(len, kept.values())) > a.keep_top_k:
                ranked = [(label, j) for label in sorted(kept) for j in kept[label]]
                ranked.sort(key=lambda p: -np.float32(scores[i, p[0], p[1]]))
                kept = {}
                for label, j in ranked[: a.keep_top_k]:
                    kept.setdefault(label, []).append(j)
            for label in sorted(kept):
                for j in kept[label]:
                    rows.append([label, scores[i, label, j], *bboxes[i, j]])
                    index.append(i * boxes + j)
            counts.append(sum(map(len, kept.values())))
    return (
        np.array(rows, scores.dtype).reshape(-1, 6),
        np.array(index, np.int32).reshape(-1, 1),
        np.array(counts, np.int32),
    )


def random_boxes(n: int, m: int, *, scale: float = 1.0, seed: int = 0) -> np.ndarray:
    """[n, m, 4] boxes (x1, y1, x2, y2) with x1 <= x2 and y1 <= y2, crowded enough to overlap."""
    rng = np.random.default_rng(seed)
    corner = rng.random((n, m, 2)) * 0.7
    size = rng.random((n, m, 2)) * 0.4 + 0.05
    return (np.concatenate([corner, corner + size], -1) * scale).astype(np.float32)


def _tied_scores() -> np.ndarray:
    """Scores with ties within a class and across classes (Paddle keeps the lower index first,
    then the lower label)."""
    scores = np.round(_SEED.random((2, 3, 8)) * 4) / 4
    return scores.astype(np.float32)


_NMS_ATTRS: Final = {"score_threshold": 0.2, "nms_top_k": 6, "keep_top_k": 5}
_BOXES: Final = random_boxes(2, 8)


def _nms_batch(_view: BatchView) -> int:
    raise Couples(
        "lists the kept boxes of every image in one Out (its dim 0 counts boxes, not images) "
        "and numbers Index across images"
    )


MULTICLASS_NMS3 = OpDef(
    op_type="multiclass_nms3",
    doc="Per-class greedy NMS over [N, M, 4] boxes and [N, C, M] scores; rows [label, score, box].",
    inputs=(In("BBoxes"), In("Scores"), In("RoisNum", DType.INT32, optional=True)),
    outputs=(
        Out("Out"),
        Out("Index", DType.INT32),
        Out("NmsRoisNum", DType.INT32, optional=True),
    ),
    types={"T": _REAL},
    attrs=MulticlassNmsAttrs,
    infer=_nms_infer,
    batch=_nms_batch,
    cost=_nms_cost,
    cases=(
        Case(
            {"BBoxes": _BOXES, "Scores": _SEED.random((2, 3, 8)).astype(np.float32)},
            _NMS_ATTRS,
            expect=nms_reference,
        ),
        Case(
            {"BBoxes": _BOXES, "Scores": _tied_scores()},
            {**_NMS_ATTRS, "background_label": -1, "keep_top_k": 7},
            expect=nms_reference,
        ),
        Case(
            {"BBoxes": random_boxes(2, 8, scale=20), "Scores": _tied_scores()},
            {**_NMS_ATTRS, "normalized": False, "keep_top_k": -1, "nms_top_k": -1},
            expect=nms_reference,
        ),
        Case(
            {
                "BBoxes": _BOXES.astype(np.float64),
                "Scores": _SEED.random((2, 4, 8)),
            },
            {**_NMS_ATTRS, "nms_eta": 0.7, "nms_threshold": 0.9, "background_label": 2},
            expect=nms_reference,
        ),
        Case(
            {"BBoxes": _BOXES, "Scores": np.zeros((2, 3, 8), np.float32)},
            _NMS_ATTRS,
            expect=nms_reference,
        ),
        *(
            Case(inputs, _NMS_ATTRS, raises=raises, code=code)
            for inputs, raises, code in (
                (
                    {"BBoxes": random_boxes(2, 7), "Scores": np.zeros((2, 3, 8), np.float32)},
                    "BBoxes: expected dims [2, 8, 4] to match Scores [2, 3, 8], got [2, 7, 4]",
                    Code.SHAPE_MISMATCH,
                ),
                (
                    {
                        "BBoxes": np.zeros((2, 8, 8), np.float32),
                        "Scores": np.zeros((2, 3, 8), np.float32),
                    },
                    "BBoxes: expected 4 coordinates per box, got 8",
                    Code.LOWERING_UNSUPPORTED,
                ),
                (
                    {
                        "BBoxes": np.zeros((8, 3, 4), np.float32),
                        "Scores": np.zeros((8, 3), np.float32),
                    },
                    "the per-RoI form is not supported",
                    Code.LOWERING_UNSUPPORTED,
                ),
                (
                    {
                        "BBoxes": np.zeros((2, 8, 5), np.float32),
                        "Scores": np.zeros((2, 3, 8), np.float32),
                    },
                    "BBoxes: expected dims [N, M, 4], got [2, 8, 5]",
                    Code.SHAPE_MISMATCH,
                ),
                (
                    {"BBoxes": _BOXES, "Scores": np.zeros((2, 3, 8), np.float64)},
                    "input 'Scores': expected float32 like the other T inputs, got float64",
                    Code.DTYPE_MISMATCH,
                ),
            )
        ),
    ),
)

OPS = (YOLO_BOX, MULTICLASS_NMS3)
