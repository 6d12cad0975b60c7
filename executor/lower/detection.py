"""ONNX lowering of validator/ops/detection.py: yolo_box and multiclass_nms3.

multiclass_nms3: a stable TopK per class sorts the candidates; greedy suppression of them
(all images and classes at once) is ONNX NonMaxSuppression where onnxruntime's decides exactly
as Paddle's NMSFast does (see _onnx_nms_exact), else a Loop over the sorted candidates; then a
stable TopK across classes for keep_top_k, and NonZero for the rows in Paddle's order (image,
label, score).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

import numpy as np
import onnx
from onnx import TensorProto, helper

from executor.lower._builder import ONNX_DTYPE, OnnxBuilder, Value
from graph_proto.types import DType
from validator.ops.detection import MulticlassNmsAttrs, YoloBoxAttrs, candidates_per_class

_NEG_INF: Final = float("-inf")
_END: Final = int(np.iinfo(np.int64).max)  # Slice to the end of an axis


def _f(b: OnnxBuilder, value: float, dtype: DType) -> str:
    """A float32 attr value (or figure) as a 0-D constant of the op's dtype, as C++ converts it."""
    return b.scalar(float(np.float32(value)), dtype)


def _i64(b: OnnxBuilder, value: int) -> str:
    return b.const(np.array(value, np.int64), hint="i64")


def _dims(b: OnnxBuilder, x: Value, axes: list[int]) -> str:
    """Dims `axes` of X as a 1-D int64 (a constant when known)."""
    if all(x.shape[a] >= 0 for a in axes):
        return b.ints([x.shape[a] for a in axes])
    return b.op("Gather", b.op("Shape", x.name), b.ints(axes))


@contextmanager
def _subgraph(b: OnnxBuilder) -> Iterator[list[onnx.NodeProto]]:
    """Nodes made inside go to a fresh list (a Loop body); constants stay in the main graph."""
    outer, b.nodes = b.nodes, []
    try:
        yield b.nodes
    finally:
        b.nodes = outer


# --- yolo_box ---------------------------------------------------------------------------------


def _yolo_box_emit(b: OnnxBuilder, x: Value, img_size: Value, a: YoloBoxAttrs) -> list[str]:
    """Paddle's kernel per cell, vectorised in its order of operations (float32 results agree
    to the rounding of its sigmoid, which Paddle takes in double)."""
    t = x.dtype
    anchors, classes = len(a.anchors) // 2, a.class_num
    data = x.name
    conf_iou = None
    if a.iou_aware:
        conf_iou = b.op("Sigmoid", b.op("Slice", data, b.ints([0]), b.ints([anchors]), b.ints([1])))
        data = b.op("Slice", data, b.ints([anchors]), b.ints([_END]), b.ints([1]))
    n, hw = _dims(b, x, [0]), _dims(b, x, [2, 3])
    shape = b.op("Concat", n, b.ints([anchors, 5 + classes]), hw, axis=0)
    p = b.op("Reshape", data, shape, allowzero=1)  # [N, A, 5 + C, H, W]

    def entry(start: int, stop: int) -> str:
        return b.op("Slice", p, b.ints([start]), b.ints([stop]), b.ints([2]))

    def one(index: int) -> str:  # [N, A, H, W]
        return b.op("Squeeze", entry(index, index + 1), b.ints([2]))

    conf = b.op("Sigmoid", one(4))
    if conf_iou is not None:
        factor = float(np.float32(a.iou_aware_factor))
        conf = b.op(
            "Mul",
            b.op("Pow", conf, _f(b, 1.0 - factor, t)),
            b.op("Pow", conf_iou, b.scalar(factor, t)),
        )
    scale = np.float32(a.scale_x_y)
    bias = np.float32(-0.5) * (scale - np.float32(1))
    sizes = b.cast(img_size.name, t)  # [N, 2]: h, w
    img_h = b.op("Reshape", b.op("Gather", sizes, _i64(b, 0), axis=1), b.ints([-1, 1, 1, 1]))
    img_w = b.op("Reshape", b.op("Gather", sizes, _i64(b, 1), axis=1), b.ints([-1, 1, 1, 1]))
    h, w = (b.cast(b.op("Gather", b.op("Shape", x.name), _i64(b, axis)), t) for axis in (2, 3))
    grid_x = b.op("Range", b.scalar(0, t), w, b.scalar(1, t))  # [W]
    grid_y = b.op("Unsqueeze", b.op("Range", b.scalar(0, t), h, b.scalar(1, t)), b.ints([1]))

    def center(grid: str, logit: str, img: str, cells: str) -> str:
        shifted = b.op("Mul", b.op("Sigmoid", logit), _f(b, float(scale), t))
        moved = b.op("Add", b.op("Add", grid, shifted), _f(b, float(bias), t))
        return b.op("Div", b.op("Mul", moved, img), cells)

    ratio = b.scalar(a.downsample_ratio, t)
    anchor_sizes = np.asarray(a.anchors, np.float64).reshape(1, anchors, 2, 1, 1)

    def size(logit: str, axis: int, img: str, cells: str) -> str:
        prior = b.const(anchor_sizes[:, :, axis].astype(t.numpy), hint="anchors")
        scaled = b.op("Mul", b.op("Mul", b.op("Exp", logit), prior), img)
        return b.op("Div", scaled, b.op("Mul", ratio, cells))

    cx, cy = center(grid_x, one(0), img_w, w), center(grid_y, one(1), img_h, h)
    bw, bh = size(one(2), 0, img_w, w), size(one(3), 1, img_h, h)
    two = b.scalar(2, t)
    half_w, half_h = b.op("Div", bw, two), b.op("Div", bh, two)
    x1, y1 = b.op("Sub", cx, half_w), b.op("Sub", cy, half_h)
    x2, y2 = b.op("Add", cx, half_w), b.op("Add", cy, half_h)
    if a.clip_bbox:
        zero, one_px = b.scalar(0, t), b.scalar(1, t)
        right, bottom = b.op("Sub", img_w, one_px), b.op("Sub", img_h, one_px)
        # NOTE: Where, not Max/Min: a NaN edge becomes 0 (or the far edge), as Paddle's ?: does.
        x1 = b.op("Where", b.op("Greater", x1, zero), x1, zero)
        y1 = b.op("Where", b.op("Greater", y1, zero), y1, zero)
        x2 = b.op("Where", b.op("Less", x2, right), x2, right)
        y2 = b.op("Where", b.op("Less", y2, bottom), y2, bottom)
    kept = b.op("Not", b.op("Less", conf, _f(b, a.conf_thresh, t)))  # [N, A, H, W]
    corners = [b.op("Unsqueeze", c, b.ints([-1])) for c in (x1, y1, x2, y2)]
    boxes = b.op("Concat", *corners, axis=-1)  # [N, A, H, W, 4]
    zero_t = b.scalar(0, t)
    boxes = b.op("Where", b.op("Unsqueeze", kept, b.ints([-1])), boxes, zero_t)
    class_scores = b.op(
        "Mul", b.op("Unsqueeze", conf, b.ints([2])), b.op("Sigmoid", entry(5, 5 + classes))
    )
    scores = b.op("Where", b.op("Unsqueeze", kept, b.ints([2])), class_scores, zero_t)
    scores = b.op("Transpose", scores, perm=[0, 1, 3, 4, 2])  # [N, A, H, W, C]
    count = b.op("ReduceProd", b.op("Concat", b.ints([anchors]), hw, axis=0), keepdims=1)
    boxes = b.op("Reshape", boxes, b.op("Concat", n, count, b.ints([4]), axis=0), allowzero=1)
    scores = b.op(
        "Reshape", scores, b.op("Concat", n, count, b.ints([classes]), axis=0), allowzero=1
    )
    return [boxes, scores]


# --- multiclass_nms3 --------------------------------------------------------------------------


def _sorted_candidates(
    b: OnnxBuilder, scores: Value, a: MulticlassNmsAttrs
) -> tuple[str, str, str, str]:
    """Per image and class, the candidates (score > threshold, not the background class) sorted
    by score, the lower box index first among ties: their scores, box indices [N, C, K], a mask
    of real candidates, and K (0-D int64)."""
    t = scores.dtype
    candidate = b.op("Greater", scores.name, _f(b, a.score_threshold, t))
    if a.background_label >= 0:
        labels = b.op("Range", _i64(b, 0), b.op("Squeeze", _dims(b, scores, [1])), _i64(b, 1))
        other = b.op("Not", b.op("Equal", labels, _i64(b, a.background_label)))
        candidate = b.op("And", candidate, b.op("Unsqueeze", other, b.ints([0, 2])))
    masked = b.op("Where", candidate, scores.name, b.scalar(_NEG_INF, t))
    # NOTE: Paddle compares scores as float even for double inputs (its pairs hold a float).
    key = masked if t == DType.FP32 else b.cast(masked, DType.FP32)
    k = _dims(b, scores, [2])
    if a.nms_top_k >= 0:
        k = b.op("Min", k, b.ints([a.nms_top_k]))
    ranked, order = b.op_n("TopK", key, k, n_outputs=2, axis=2, largest=1, sorted=1)
    valid = b.op("Greater", ranked, b.const(np.asarray(_NEG_INF, np.float32)))
    sorted_scores = b.op("GatherElements", scores.name, order, axis=2)
    return sorted_scores, order, valid, b.op("Squeeze", k)


def _corners(b: OnnxBuilder, bboxes: Value, order: str, scores: Value) -> list[str]:
    """x1, y1, x2, y2 [N, C, K] of the sorted candidates."""
    n_c_k = b.op("Shape", order)
    flat = b.op("Reshape", order, b.op("Concat", _dims(b, scores, [0]), b.ints([-1, 1]), axis=0))
    picked = b.op("GatherND", bboxes.name, flat, batch_dims=1)  # [N, C*K, 4]
    picked = b.op("Reshape", picked, b.op("Concat", n_c_k, b.ints([4]), axis=0), allowzero=1)
    return [
        b.op(
            "Squeeze", b.op("Slice", picked, b.ints([i]), b.ints([i + 1]), b.ints([3])), b.ints([3])
        )
        for i in range(4)
    ]


def _area(b: OnnxBuilder, c: list[str], t: DType, normalized: bool) -> str:
    x1, y1, x2, y2 = c
    w, h = b.op("Sub", x2, x1), b.op("Sub", y2, y1)
    if not normalized:
        w, h = b.op("Add", w, b.scalar(1, t)), b.op("Add", h, b.scalar(1, t))
    invalid = b.op("Or", b.op("Less", x2, x1), b.op("Less", y2, y1))
    return b.op("Where", invalid, b.scalar(0, t), b.op("Mul", w, h))


def _overlap(
    b: OnnxBuilder, cur: list[str], cur_area: str, c: list[str], area: str, t: DType, norm: bool
) -> str:
    """Paddle's JaccardOverlap of the current box ([N, C, 1]) with every candidate ([N, C, K])."""
    apart = b.op(
        "Or",
        b.op("Or", b.op("Greater", c[0], cur[2]), b.op("Less", c[2], cur[0])),
        b.op("Or", b.op("Greater", c[1], cur[3]), b.op("Less", c[3], cur[1])),
    )
    inter_w = b.op("Sub", b.op("Min", cur[2], c[2]), b.op("Max", cur[0], c[0]))
    inter_h = b.op("Sub", b.op("Min", cur[3], c[3]), b.op("Max", cur[1], c[1]))
    if not norm:
        inter_w, inter_h = (
            b.op("Add", inter_w, b.scalar(1, t)),
            b.op("Add", inter_h, b.scalar(1, t)),
        )
    inter = b.op("Mul", inter_w, inter_h)
    union = b.op("Sub", b.op("Add", cur_area, area), inter)
    return b.op("Where", apart, b.scalar(0, t), b.op("Div", inter, union))


def _greedy(
    b: OnnxBuilder,
    c: list[str],
    valid: str,
    k: str,
    bound: int,
    t: DType,
    a: MulticlassNmsAttrs,
) -> str:
    """Paddle's NMSFast for every image and class at once: a Loop over the sorted candidates
    keeps one when its overlap with every box kept before is <= the (adaptive) threshold."""
    area = _area(b, c, t, a.normalized)
    # Trips: the most candidates any image and class has (0 added: there may be none).
    counts = b.op("ReduceSum", b.cast(valid, DType.INT64), b.ints([2]), keepdims=0)
    flat_counts = b.op("Concat", b.op("Reshape", counts, b.ints([-1])), b.ints([0]), axis=0)
    most = b.op("ReduceMax", flat_counts, keepdims=0)
    positions = b.op("Range", _i64(b, 0), k, _i64(b, 1))
    kept0 = b.op("And", valid, b.const(np.asarray(False)))
    n_c = b.op("Slice", b.op("Shape", valid), b.ints([0]), b.ints([2]))
    thr0 = b.op("Expand", _f(b, a.nms_threshold, t), n_c)
    i, cond_in, kept_in, thr_in = (b.fresh(h) for h in ("i", "cond_in", "kept_in", "thr_in"))
    with _subgraph(b) as nodes:
        at = b.op("Reshape", i, b.ints([1]))
        cur = [b.op("Gather", x, at, axis=2) for x in c]  # [N, C, 1]
        cur_area = b.op("Gather", area, at, axis=2)
        overlap = _overlap(b, cur, cur_area, c, area, t, a.normalized)
        within = b.op("LessOrEqual", overlap, b.op("Unsqueeze", thr_in, b.ints([2])))
        clash = b.op("And", kept_in, b.op("Not", within))
        suppressed = b.op("ReduceMax", b.cast(clash, DType.INT32), axes=[2], keepdims=0)
        keep = b.op(
            "And",
            b.op("Squeeze", b.op("Gather", valid, at, axis=2), b.ints([2])),
            b.op("Equal", suppressed, b.const(np.asarray(0, np.int32))),
        )  # [N, C]
        here = b.op("Equal", positions, i)
        kept_out = b.op("Or", kept_in, b.op("And", b.op("Unsqueeze", keep, b.ints([2])), here))
        thr_out = thr_in
        if a.nms_eta < 1:
            shrink = b.op("And", keep, b.op("Greater", thr_in, b.scalar(0.5, t)))
            thr_out = b.op("Where", shrink, b.op("Mul", thr_in, _f(b, a.nms_eta, t)), thr_in)
        cond_out = b.op("Less", b.op("Add", i, _i64(b, 1)), most)
        thr_out = b.op("Identity", thr_out)
    body = helper.make_graph(
        nodes,
        b.fresh("nms_body"),
        [
            helper.make_tensor_value_info(i, TensorProto.INT64, []),
            helper.make_tensor_value_info(cond_in, TensorProto.BOOL, []),
            helper.make_tensor_value_info(kept_in, TensorProto.BOOL, [None, None, None]),
            helper.make_tensor_value_info(thr_in, ONNX_DTYPE[t], [None, None]),
        ],
        [
            helper.make_tensor_value_info(cond_out, TensorProto.BOOL, []),
            helper.make_tensor_value_info(kept_out, TensorProto.BOOL, [None, None, None]),
            helper.make_tensor_value_info(thr_out, ONNX_DTYPE[t], [None, None]),
        ],
    )
    # The gate wants a constant trip count: the bound on K; the condition stops at `most`.
    trips = b.const(np.asarray(bound, np.int64), hint="trips")
    going = b.op("Greater", most, _i64(b, 0))
    kept, _ = b.op_n("Loop", trips, going, kept0, thr0, n_outputs=2, body=body)
    return kept


def _onnx_nms_exact(t: DType, a: MulticlassNmsAttrs) -> bool:
    """Whether onnxruntime's NonMaxSuppression (CPU kernel, non_max_suppression.cc and its
    helper's SuppressByIOU) keeps exactly the boxes NMSFast keeps, given candidates of positive
    finite area (checked at run time, _proper_boxes). It computes in float32, with one fixed
    threshold that must lie in [0, 1] (it refuses others), and without Paddle's +1 on widths
    and heights: emulating that by shifting x2 and y2 would round the IoU differently, so
    normalized=False keeps the Loop. NMSFast shrinks the threshold by eta only while it is
    above 0.5.

    NOTE: checked against Paddle with onnxruntime's CPU kernel only. Its CUDA kernel shares
    SuppressByIOU, but nvcc may fuse area1 + area2 into an FMA, which can move an IoU that
    lies within a rounding of the threshold."""
    threshold = np.float32(a.nms_threshold)
    fixed = not (np.float32(a.nms_eta) < 1 and threshold > 0.5)
    return t == DType.FP32 and a.normalized and fixed and bool(0 <= threshold <= 1)


def _proper_boxes(b: OnnxBuilder, c: list[str], valid: str) -> str:
    """True (0-D) when every candidate box has a positive width and a positive finite area.

    Then onnxruntime's IoU is JaccardOverlap to the bit: its min/max reordering of the corners
    changes nothing, its areas, intersection and union are the same float32 products and sums,
    and boxes apart or touching are kept by both. An empty or inverted box differs (Paddle's
    area is 0, and two such boxes give Paddle 0/0, a suppression; onnxruntime keeps both), as
    do NaN and infinite ones."""
    x1, y1, x2, y2 = c
    zero = b.scalar(0, DType.FP32)
    width = b.op("Sub", x2, x1)
    area = b.op("Mul", width, b.op("Sub", y2, y1))
    finite = b.op("Less", area, b.scalar(float("inf"), DType.FP32))
    proper = b.op(
        "And", b.op("Greater", width, zero), b.op("And", b.op("Greater", area, zero), finite)
    )
    improper = b.op("And", valid, b.op("Not", proper))
    count = b.op("ReduceSum", b.cast(improper, DType.INT64), keepdims=0)  # 0 when empty
    return b.op("Equal", count, _i64(b, 0))


def _onnx_nms(
    b: OnnxBuilder,
    bboxes: Value,
    scores: Value,
    order: str,
    valid: str,
    k: str,
    a: MulticlassNmsAttrs,
) -> str:
    """kept [N, C, K] by ONNX NonMaxSuppression. It is given each candidate's rank (K for the
    best, down to 1) in place of its score, so it visits them in exactly the sorted order
    (ties, nms_top_k and the background label already settled by the stable TopK) whatever
    its own tie rule, and every other box (rank 0) falls under its score threshold 0."""
    ranks = b.cast(b.op("Sub", k, b.op("Range", _i64(b, 0), k, _i64(b, 1))), DType.FP32)
    priority = b.op("Where", valid, ranks, b.scalar(0, DType.FP32))  # [N, C, K]
    n_c_m = b.op("Shape", scores.name)
    ranked = b.op("ScatterElements", b.op("ConstantOfShape", n_c_m), order, priority, axis=2)
    threshold = _f(b, a.nms_threshold, DType.FP32)
    # At most K boxes a class are candidates, so K never cuts the selection.
    selected = b.op(
        "NonMaxSuppression", bboxes.name, ranked, k, threshold, b.scalar(0, DType.FP32)
    )  # [S, 3]: image, class, box
    falses = helper.make_tensor("false", TensorProto.BOOL, [1], [False])
    trues = helper.make_tensor("true", TensorProto.BOOL, [1], [True])
    picked = b.op(
        "ScatterND",
        b.op("ConstantOfShape", n_c_m, value=falses),
        selected,
        b.op(
            "ConstantOfShape",
            b.op("Slice", b.op("Shape", selected), b.ints([0]), b.ints([1])),
            value=trues,
        ),
    )  # [N, C, M]
    return b.op("GatherElements", picked, order, axis=2)


def _suppressed(
    b: OnnxBuilder,
    bboxes: Value,
    scores: Value,
    c: list[str],
    order: str,
    valid: str,
    k: str,
    bound: int,
    a: MulticlassNmsAttrs,
) -> str:
    """kept [N, C, K]: NonMaxSuppression when every candidate box is proper (an If at run
    time), the Loop otherwise and where onnxruntime's rule is not Paddle's (_onnx_nms_exact).
    NonMaxSuppression runs the ~30 ops of each of the Loop's trips as one kernel."""
    t = scores.dtype
    if not _onnx_nms_exact(t, a):
        return _greedy(b, c, valid, k, bound, t, a)
    with _subgraph(b) as fast_nodes:
        fast = _onnx_nms(b, bboxes, scores, order, valid, k, a)
    with _subgraph(b) as loop_nodes:
        loop = _greedy(b, c, valid, k, bound, t, a)
    return b.op(
        "If",
        _proper_boxes(b, c, valid),
        then_branch=_kept_branch(b, fast_nodes, fast),
        else_branch=_kept_branch(b, loop_nodes, loop),
    )


def _kept_branch(b: OnnxBuilder, nodes: list[onnx.NodeProto], kept: str) -> onnx.GraphProto:
    info = helper.make_tensor_value_info(kept, TensorProto.BOOL, [None, None, None])
    return helper.make_graph(nodes, b.fresh("nms_branch"), [], [info])


def _multiclass_nms3_emit(
    b: OnnxBuilder, bboxes: Value, scores: Value, _rois_num: Value | None, a: MulticlassNmsAttrs
) -> list[str]:
    """RoisNum is refused by validation (the per-RoI form)."""
    t = scores.dtype
    sorted_scores, order, valid, k = _sorted_candidates(b, scores, a)
    bound = candidates_per_class(max(bboxes.shape[1], scores.shape[2]), a)
    corners = _corners(b, bboxes, order, scores)
    kept = _suppressed(b, bboxes, scores, corners, order, valid, k, bound, a)  # [N, C, K]
    n = _dims(b, scores, [0])
    flat_shape = b.op("Concat", n, b.ints([-1]), axis=0)
    kept = b.op("Reshape", kept, flat_shape)  # [N, C*K]: label-major, then score order
    flat_scores = b.op("Reshape", sorted_scores, flat_shape)
    if a.keep_top_k >= 0:
        # The best keep_top_k kept boxes of each image; ties go to the lower label, then to
        # the earlier kept box, as Paddle's stable sort of its (label, kept order) list does.
        key = b.op("Where", kept, flat_scores, b.scalar(_NEG_INF, t))
        key = key if t == DType.FP32 else b.cast(key, DType.FP32)
        width = b.op("Gather", b.op("Shape", key), b.ints([1]))
        top = b.op("Min", width, b.ints([a.keep_top_k]))
        _, best = b.op_n("TopK", key, top, n_outputs=2, axis=1, largest=1, sorted=1)
        zeros = helper.make_tensor("zero", TensorProto.INT32, [1], [0])
        ones = helper.make_tensor("one", TensorProto.INT32, [1], [1])
        marks = b.op(
            "ScatterElements",
            b.op("ConstantOfShape", b.op("Shape", kept), value=zeros),
            best,
            b.op("ConstantOfShape", b.op("Shape", best), value=ones),
            axis=1,
        )
        kept = b.op("And", kept, b.op("Greater", marks, b.const(np.asarray(0, np.int32))))
    where = b.op("Transpose", b.op("NonZero", kept), perm=[1, 0])  # [R, 2]: image, position
    image = b.op("Gather", where, _i64(b, 0), axis=1)
    position = b.op("Gather", where, _i64(b, 1), axis=1)
    label = b.cast(b.op("Div", position, k), t)
    score = b.op("GatherND", flat_scores, where)
    box_index = b.op("GatherND", b.op("Reshape", order, flat_shape), where)
    box = b.op(
        "GatherND",
        bboxes.name,
        b.op("Concat", *(b.op("Unsqueeze", v, b.ints([1])) for v in (image, box_index)), axis=1),
    )
    column = [b.op("Unsqueeze", v, b.ints([1])) for v in (label, score)]
    out = b.op("Concat", *column, box, axis=1)
    boxes_per_image = b.op("Squeeze", _dims(b, bboxes, [1]))
    index = b.op("Add", b.op("Mul", image, boxes_per_image), box_index)
    index = b.cast(b.op("Unsqueeze", index, b.ints([1])), DType.INT32)
    counts = b.op("ReduceSum", b.cast(kept, DType.INT32), b.ints([1]), keepdims=0)
    return [out, index, counts]


EMITTERS: Final = {
    "yolo_box": _yolo_box_emit,
    "multiclass_nms3": _multiclass_nms3_emit,
}
