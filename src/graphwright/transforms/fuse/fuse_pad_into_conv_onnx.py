"""fuse_pad_into_conv: a zero Pad before a Conv becomes the Conv's own padding.

Before::  p = Pad(x, pads=[0, 0, 1, 2, 0, 0, 1, 2], mode="constant", value=0); y = Conv(p, W, pads=[0, 0, 0, 0])
After::   y = Conv(x, W, pads=[1, 2, 1, 2])

ONNX ``pads`` list all begins then all ends; a Pad over ``N, C, H, W`` adds
``pads[2:r]`` and ``pads[r+2:]`` (``r`` = rank) to the Conv's begin and end
pads.  Only when: constant mode with a zero (or absent) fill value, no
padding of the batch and channel axes, no negative pads, the Conv has
``auto_pad`` NOTSET, and the Pad output is read only by the Conv (and is not
a graph output).  Pads come from the attribute (opset < 11) or constant
inputs (with optional ``axes``, opset 18).  All graphs; O(N + E).
"""

from __future__ import annotations

import numpy as np

from ...ir import Attr, Model, Node, topological_order
from .._onnx import all_graphs, const_array, drop_node, is_standard, only_reader
from ..context import TransformContext
from ..registry import TransformResult, transform

__all__ = ["fuse_pad_into_conv"]


def _pads(pad: Node, rank: int) -> list[int] | None:
    """Pad's begins+ends over all ``rank`` axes when it is a zero constant pad, else None."""
    mode = pad.attr("mode", b"constant")
    if (mode.decode() if isinstance(mode, bytes) else str(mode)) != "constant":
        return None
    if len(pad.inputs) > 1 and pad.inputs[1] is not None:
        raw = const_array(pad.inputs[1])
        fill = const_array(pad.inputs[2]) if len(pad.inputs) > 2 and pad.inputs[2] is not None else None
        if raw is None or (len(pad.inputs) > 2 and pad.inputs[2] is not None and fill is None):
            return None
        if fill is not None and np.any(fill != 0):
            return None
        pads = [int(p) for p in raw.reshape(-1)]
        if len(pad.inputs) > 3 and pad.inputs[3] is not None:
            axes = const_array(pad.inputs[3])
            if axes is None:
                return None
            full = [0] * (2 * rank)
            n = len(axes)
            for k, a in enumerate(int(a) + rank if a < 0 else int(a) for a in axes.reshape(-1)):
                full[a], full[a + rank] = pads[k], pads[k + n]
            pads = full
    else:
        attr = pad.attr("pads", pad.attr("paddings"))
        if attr is None or float(pad.attr("value", 0.0)) != 0.0:
            return None
        pads = [int(p) for p in attr]
    return pads if len(pads) == 2 * rank else None


def _fuse(conv: Node) -> bool:
    x = conv.inputs[0]
    pad = x.producer if x is not None else None
    if x is None or pad is None or pad.op != "Pad" or not is_standard(pad) or pad.graph is not conv.graph:
        return False
    if only_reader(x) is not conv or pad.inputs[0] is None or x.shape is None:
        return False
    auto_pad = conv.attr("auto_pad", b"NOTSET")
    if (auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)) != "NOTSET":
        return False
    rank = len(x.shape)
    pads = _pads(pad, rank)
    if pads is None or any(p < 0 for p in pads) or any(pads[i] or pads[i + rank] for i in (0, 1)):
        return False
    spatial = rank - 2
    current = [int(p) for p in conv.attr("pads", [0] * (2 * spatial))]
    if len(current) != 2 * spatial:
        return False
    merged = [current[i] + pads[2 + i] for i in range(spatial)] + \
             [current[spatial + i] + pads[rank + 2 + i] for i in range(spatial)]
    conv.attrs["pads"] = Attr.ints(merged)
    conv.replace_input(0, pad.inputs[0])
    drop_node(pad)
    return True


@transform("fuse_pad_into_conv", dialects={"onnx"})
def fuse_pad_into_conv(model: Model, ctx: TransformContext) -> TransformResult:
    """Merge a constant zero Pad into the padding of the Conv that reads it."""
    fused = 0
    for graph in all_graphs(model):
        for node in topological_order(graph):
            if node.graph is None or node.op != "Conv" or not is_standard(node) or not node.inputs:
                continue
            if _fuse(node):
                fused += 1
    return TransformResult(bool(fused), {"pads_fused": fused})
