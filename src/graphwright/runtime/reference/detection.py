"""Box suppression: NON_MAX_SUPPRESSION_V4/V5 (float32) and the custom operator
``TFLite_Detection_PostProcess`` (SSD box decoding + multi-class NMS; float32 or uint8
box encodings, anchors and scores), as LiteRT's reference kernels.

Ties between equal scores are ordered as LiteRT's C++ standard library orders them:
V4/V5 keep their candidates in a ``std::priority_queue`` and the post-process's fast NMS picks
each anchor's classes with ``std::partial_sort`` — neither is stable, so both are replayed
here step by step on libstdc++'s binary heap (:class:`_Heap`); the post-process's score order
and its regular-NMS merge are stable.  O(boxes²) per class, as LiteRT.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from flatbuffers import flexbuffers  # type: ignore[import-untyped]

from ._common import OpContext, kernel
from .prepare import OpCheck, Shape, prepare_rule

__all__ = ["DETECTION_POSTPROCESS"]

#: the custom code SSD models give their post-processing operator
DETECTION_POSTPROCESS = "TFLite_Detection_PostProcess"


class _Heap:
    """libstdc++'s heap algorithms on a list, ``less(a, b)`` the ordering (a max-heap of it)."""

    def __init__(self, items: list[Any], less: Callable[[Any, Any], bool]) -> None:
        self.items, self.less = items, less

    def _sift_up(self, hole: int, top: int, value: Any) -> None:
        items, parent = self.items, (hole - 1) // 2
        while hole > top and self.less(items[parent], value):
            items[hole] = items[parent]
            hole, parent = parent, (parent - 1) // 2
        items[hole] = value

    def _adjust(self, hole: int, length: int, value: Any) -> None:
        items, top, child = self.items, hole, hole
        while child < (length - 1) // 2:
            child = 2 * (child + 1)
            if self.less(items[child], items[child - 1]):
                child -= 1
            items[hole] = items[child]
            hole = child
        if length % 2 == 0 and child == (length - 2) // 2:
            child = 2 * (child + 1)
            items[hole] = items[child - 1]
            hole = child - 1
        self._sift_up(hole, top, value)

    def push(self, value: Any) -> None:
        """``priority_queue::push``: append, then ``push_heap``."""
        self.items.append(value)
        self._sift_up(len(self.items) - 1, 0, value)

    def pop(self) -> Any:
        """``priority_queue::top`` + ``pop``: ``pop_heap`` then remove the last element."""
        items = self.items
        last = items[-1]
        items[-1] = items[0]
        self._adjust(0, len(items) - 1, last)
        return items.pop()

    def _pop_into(self, length: int, slot: int) -> None:
        """``__pop_heap(first, first + length, slot)``: the top goes to ``slot``, ``slot``'s value into the heap."""
        value = self.items[slot]
        self.items[slot] = self.items[0]
        self._adjust(0, length, value)

    def partial_sort(self, middle: int) -> None:
        """``std::partial_sort(begin, begin + middle, end)``: heap-select, then sort the heap."""
        for parent in range((middle - 2) // 2, -1, -1):  # make_heap
            self._adjust(parent, middle, self.items[parent])
        for i in range(middle, len(self.items)):
            if self.less(self.items[i], self.items[0]):
                self._pop_into(middle, i)
        for end in range(middle - 1, 0, -1):  # sort_heap
            self._pop_into(end, end)


def _decreasing_top(values: np.ndarray, count: int) -> list[int]:
    """LiteRT's DecreasingPartialArgSort: the first max for one, else ``std::partial_sort`` of indices."""
    if count == 1:
        return [int(np.argmax(values))]
    v = values.tolist()
    heap = _Heap(list(range(len(v))), lambda i, j: v[i] > v[j])
    heap.partial_sort(count)
    return heap.items[:count]


# -- NON_MAX_SUPPRESSION_V4 / V5 ---------------------------------------------------------------------

def _ious(low: np.ndarray, high: np.ndarray, area: np.ndarray, i: int, others: list[int]) -> list[float]:
    """LiteRT's float IoUs of box ``i`` with ``others`` (float32; 0 with an empty box or union),
    from the boxes' [y, x] minima ``low``, maxima ``high`` and areas."""
    j = np.asarray(others, np.intp)
    side = np.maximum(np.minimum(high[i], high[j]) - np.maximum(low[i], low[j]), np.float32(0))
    inter = side[:, 0] * side[:, 1]
    union = area[i] + area[j] - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        iou = np.where((area[i] > 0) & (area[j] > 0) & (union != 0), inter / union, np.float32(0))
    return iou.astype(np.float32).tolist()  # type: ignore[no-any-return]


def _soft_nms(boxes: np.ndarray, scores: np.ndarray, max_out: int, iou_threshold: np.float32,
              score_threshold: np.float32, sigma: np.float32) -> tuple[list[int], list[np.float32]]:
    """LiteRT's NonMaxSuppression (float): a max-heap of (score, index, first selection to
    compare with) above the score threshold; a candidate within ``iou_threshold`` of a
    selected box (the latest first) is dropped, else (sigma > 0) its score decays by
    ``exp(-0.5/sigma·iou²)`` and it goes back into the heap unless it fell to the threshold."""
    low, high = np.minimum(boxes[:, :2], boxes[:, 2:]), np.maximum(boxes[:, :2], boxes[:, 2:])
    area = (high[:, 0] - low[:, 0]) * (high[:, 1] - low[:, 1])
    heap = _Heap([], lambda a, b: a[0] < b[0])
    for i, s in enumerate(scores.tolist()):
        if s > score_threshold:
            heap.push((np.float32(s), i, 0))
    selected: list[int] = []
    selected_scores: list[np.float32] = []
    wanted = min(len(heap.items), max_out)
    scale = np.float32(-0.5) / sigma if sigma > 0 else np.float32(0)
    while len(selected) < wanted and heap.items:
        score, index, begin = heap.pop()
        original, suppressed = score, False
        earlier = selected[begin:][::-1]
        for iou in map(np.float32, _ious(low, high, area, index, earlier) if earlier else []):
            if iou >= iou_threshold:
                suppressed = True
                break
            if sigma > 0:
                score = score * np.exp(scale * iou * iou, dtype=np.float32)
            if score <= score_threshold:
                break
        if suppressed:
            continue
        compared = len(selected)
        if score == original:
            selected.append(index)
            selected_scores.append(score)
        if score > score_threshold:  # LiteRT requeues a selected candidate too (its IoU with itself drops it)
            heap.push((score, index, compared))
    return selected, selected_scores


@kernel("NON_MAX_SUPPRESSION_V4", "NON_MAX_SUPPRESSION_V5")
def non_max_suppression(ctx: OpContext) -> list[np.ndarray]:
    """Selected box indices (zero-padded to max_output_size), V5 their (soft-NMS) scores, and their count."""
    boxes, scores = ctx.x(0).astype(np.float32), ctx.x(1).astype(np.float32)
    max_out = int(ctx.x(2).reshape(-1)[0])
    iou_threshold, score_threshold = (np.float32(ctx.x(i).reshape(-1)[0]) for i in (3, 4))
    v5 = ctx.node.op == "NON_MAX_SUPPRESSION_V5"
    sigma = np.float32(ctx.x(5).reshape(-1)[0]) if v5 else np.float32(0)
    if max_out < 0 or iou_threshold < 0 or sigma < 0:
        raise ctx.error(f"max_output_size {max_out}, iou_threshold {iou_threshold} and soft_nms_sigma {sigma} "
                        "must not be negative (LiteRT refuses them)")
    selected, kept = _soft_nms(boxes, scores, max_out, iou_threshold, score_threshold, sigma)
    indices = np.zeros(max_out, np.int32)
    indices[:len(selected)] = selected
    count = np.asarray(len(selected), np.int32)
    if not v5:
        return [indices, count]
    values = np.zeros(max_out, np.float32)
    values[:len(kept)] = kept
    return [indices, values, count]


@prepare_rule("NON_MAX_SUPPRESSION_V4", arity=(5, 5), outputs=2)  # indices, count
@prepare_rule("NON_MAX_SUPPRESSION_V5", arity=(6, 6), outputs=3)  # indices, scores, count
def _nms_shapes(op: OpCheck) -> list[Shape]:
    v5 = op.node.op == "NON_MAX_SUPPRESSION_V5"
    inputs = 6 if v5 else 5
    for i in range(inputs):
        op.need(i)
    boxes, scores = op.rank(0, 2), op.rank(1, 1)
    if boxes is not None and (boxes[1] != 4 or (scores is not None and scores[0] != boxes[0])):
        raise op.fail(f"boxes {list(boxes)} and scores {list(scores or ())} do not fit ([N, 4] and [N])")
    for i, value in enumerate(op.node.inputs):
        if i != 2 and value is not None and value.dtype is not None and value.dtype.value != "float32":
            raise op.fail(f"input {i} is {value.dtype.value}; LiteRT's kernel takes float32 boxes, scores and thresholds")
    size = op.ints(2, "max_output_size")
    selected = None if size is None else (max(size[0], 0),)
    return [selected, selected, ()] if v5 else [selected, ()]


# -- TFLite_Detection_PostProcess --------------------------------------------------------------------

def _options(ctx: OpContext) -> dict[str, Any]:
    """The operator's flexbuffer map (parsed once per node)."""
    if "options" not in ctx.cache:
        raw = ctx.attr("custom_options")
        if raw is None:
            raise ctx.error("it has no custom options")
        try:
            ctx.cache["options"] = flexbuffers.Loads(bytes(raw))
        except Exception as e:  # any malformed buffer: the model is at fault
            raise ctx.error(f"its custom options are not a flexbuffer map ({e})") from None
    return ctx.cache["options"]  # type: ignore[no-any-return]


def _dequantized(ctx: OpContext, i: int) -> np.ndarray:
    """float32 input ``i``, or uint8 ``(float(q) - zero_point) * scale`` in float32, as LiteRT."""
    x = ctx.x(i)
    if x.dtype == np.float32:
        return x
    q = ctx.in_quant(i)
    if x.dtype != np.uint8 or q is None:
        raise ctx.error(f"input {i} is {x.dtype}; LiteRT's kernel takes float32 or quantized uint8")
    return (x.astype(np.float32) - np.float32(q.zp)) * np.float32(q.s)


def _decode(ctx: OpContext, scales: np.ndarray) -> np.ndarray:
    """Center-size encodings [y, x, h, w] on the anchors -> corners [ymin, xmin, ymax, xmax] (float32),
    in double as LiteRT: center = y / y_scale · anchor_h + anchor_y, half = 0.5·exp(h / h_scale)·anchor_h."""
    enc = _dequantized(ctx, 0)[0, :, :4].astype(np.float64)
    anchors = _dequantized(ctx, 2).astype(np.float64)
    if anchors.shape != (enc.shape[0], 4):
        raise ctx.error(f"anchors {list(anchors.shape)} do not fit {enc.shape[0]} boxes")
    center = (enc[:, :2] / scales[:2] * anchors[:, 2:] + anchors[:, :2]).astype(np.float32)
    half = (0.5 * np.exp(enc[:, 2:] / scales[2:]) * anchors[:, 2:]).astype(np.float32)
    return np.concatenate([center - half, center + half], axis=1)


def _single_class(boxes: np.ndarray, scores: np.ndarray, limit: int, score_threshold: np.float32,
                  iou_threshold: np.float32) -> list[int]:
    """Greedy NMS: scores >= threshold in stable decreasing order; each kept box drops the later
    ones whose IoU with it exceeds the threshold (float32, 0 with an empty box); at most ``limit``."""
    keep = np.flatnonzero(scores >= score_threshold)
    order = keep[np.argsort(-scores[keep], kind="stable")]
    corners = boxes[order]
    area = (corners[:, 2] - corners[:, 0]) * (corners[:, 3] - corners[:, 1])
    active = np.ones(len(order), bool)
    selected: list[int] = []
    for i in range(len(order)):
        if len(selected) >= limit or not active[i:].any():
            break
        if not active[i]:
            continue
        selected.append(int(order[i]))
        active[i] = False
        later = i + 1 + np.flatnonzero(active[i + 1:])
        side = np.maximum(np.minimum(corners[i, 2:], corners[later, 2:]) - np.maximum(corners[i, :2], corners[later, :2]),
                          np.float32(0))
        inter = side[:, 0] * side[:, 1]
        with np.errstate(divide="ignore", invalid="ignore"):
            iou = np.where((area[i] > 0) & (area[later] > 0), inter / (area[i] + area[later] - inter), np.float32(0))
        active[later[iou > iou_threshold]] = False
    return selected


@kernel(DETECTION_POSTPROCESS, custom=True)
def detection_postprocess(ctx: OpContext) -> list[np.ndarray]:
    """As LiteRT's custom kernel: decode the boxes, then fast NMS (each anchor ranked by its best
    class, its top ``max_classes_per_detection`` classes reported) or regular NMS (per class, the
    best ``max_detections`` over all classes kept); outputs boxes, classes, scores, count (float32).
    Slots after the last detection are zero (LiteRT zeroes them in regular NMS and leaves them
    unwritten in fast NMS)."""
    o = _options(ctx)
    scales = np.asarray([o["y_scale"], o["x_scale"], o["h_scale"], o["w_scale"]], np.float32).astype(np.float64)
    max_det, per_detection = int(o["max_detections"]), int(o["max_classes_per_detection"])
    classes = int(o["num_classes"])
    score_threshold, iou_threshold = np.float32(o["nms_score_threshold"]), np.float32(o["nms_iou_threshold"])
    if not 0 < iou_threshold <= 1 or max_det < 0:
        raise ctx.error(f"nms_iou_threshold {iou_threshold} is not in (0, 1] or max_detections {max_det} "
                        "is negative (LiteRT refuses them)")
    boxes = _decode(ctx, scales)
    if np.any(boxes[:, 0] > boxes[:, 2]) or np.any(boxes[:, 1] > boxes[:, 3]):
        raise ctx.error("a decoded box has its minimum above its maximum (LiteRT refuses it)")
    all_scores = _dequantized(ctx, 1)[0]
    offset = all_scores.shape[1] - classes  # 1 with a background class first
    if offset not in (0, 1) or all_scores.shape[0] != boxes.shape[0]:
        raise ctx.error(f"scores {list(ctx.x(1).shape)} do not fit {boxes.shape[0]} boxes of {classes} classes")
    scores = all_scores[:, offset:]
    slots = max_det * per_detection
    out_boxes = np.zeros((1, slots, 4), np.float32)
    out_classes, out_scores = np.zeros((1, slots), np.float32), np.zeros((1, slots), np.float32)
    if o.get("use_regular_nms"):
        per_class = int(o.get("detections_per_class", 100))
        if per_class <= 0:
            raise ctx.error(f"detections_per_class {per_class} is not positive (LiteRT refuses it)")
        picked = _regular(boxes, scores, per_class, max_det, score_threshold, iou_threshold)
        for slot, (box, cls, score) in enumerate(picked):
            out_boxes[0, slot], out_classes[0, slot], out_scores[0, slot] = boxes[box], cls, score
        count = len(picked)
    else:
        if per_detection <= 0:
            raise ctx.error(f"max_classes_per_detection {per_detection} is not positive (LiteRT refuses it)")
        top = min(per_detection, classes)
        ranked = [_decreasing_top(row, top) for row in scores]
        best = np.asarray([row[r[0]] for row, r in zip(scores, ranked)], np.float32)
        selected = _single_class(boxes, best, max_det, score_threshold, iou_threshold)
        for n, box in enumerate(selected):
            for col, cls in enumerate(ranked[box]):
                slot = n * per_detection + col
                out_boxes[0, slot], out_classes[0, slot], out_scores[0, slot] = boxes[box], cls, scores[box, cls]
        count = len(selected)
    return [out_boxes, out_classes, out_scores, np.asarray([count], np.float32)]


def _regular(boxes: np.ndarray, scores: np.ndarray, per_class: int, max_det: int, score_threshold: np.float32,
             iou_threshold: np.float32) -> list[tuple[int, int, np.float32]]:
    """Regular NMS: class by class, its NMS selections (at most min(detections_per_class,
    max_detections)) merge stably by decreasing score after the best kept so far, and the
    first ``max_detections`` stay (LiteRT's single-threaded inplace_merge); (box, class, score)."""
    kept: list[tuple[int, int, np.float32]] = []
    for cls in range(scores.shape[1]):
        column = scores[:, cls]
        kept += [(box, cls, column[box]) for box in
                 _single_class(boxes, column, min(per_class, max_det), score_threshold, iou_threshold)]
        kept = sorted(kept, key=lambda pick: -pick[2])[:max_det]  # both runs sorted: a stable merge
    return kept


@prepare_rule(DETECTION_POSTPROCESS, arity=(3, 3), outputs=4)  # boxes, classes, scores, count
def _detection_shapes(op: OpCheck) -> list[Shape]:
    for i, what in enumerate(("box encodings", "class predictions", "anchors")):
        op.need(i, what)
    boxes, _, _ = op.rank(0, 3), op.rank(1, 3), op.rank(2, 2)
    if boxes is not None and (boxes[0] != 1 or boxes[2] < 4):
        raise op.fail(f"box encodings {list(boxes)} are not [1, boxes, >= 4]")
    return [None] * 4
